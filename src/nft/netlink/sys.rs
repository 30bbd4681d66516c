//! Kernel constants from the nf_tables uapi header (linux-libc-dev `linux/netfilter/nf_tables.h`),
//! named exactly as there. Generated from the header; keep in sync by regenerating, not by hand.
#![allow(dead_code, non_upper_case_globals)]

// enum nft_registers
pub const NFT_REG_VERDICT: u32 = 0;
pub const NFT_REG_1: u32 = 1;
pub const NFT_REG_2: u32 = 2;
pub const NFT_REG_3: u32 = 3;
pub const NFT_REG_4: u32 = 4;
pub const NFT_REG32_00: u32 = 8;
pub const NFT_REG32_01: u32 = 9;
pub const NFT_REG32_02: u32 = 10;
pub const NFT_REG32_03: u32 = 11;
pub const NFT_REG32_04: u32 = 12;
pub const NFT_REG32_05: u32 = 13;
pub const NFT_REG32_06: u32 = 14;
pub const NFT_REG32_07: u32 = 15;
pub const NFT_REG32_08: u32 = 16;
pub const NFT_REG32_09: u32 = 17;
pub const NFT_REG32_10: u32 = 18;
pub const NFT_REG32_11: u32 = 19;
pub const NFT_REG32_12: u32 = 20;
pub const NFT_REG32_13: u32 = 21;
pub const NFT_REG32_14: u32 = 22;
pub const NFT_REG32_15: u32 = 23;

// enum nft_verdicts
pub const NFT_CONTINUE: i32 = -1;
pub const NFT_BREAK: i32 = -2;
pub const NFT_JUMP: i32 = -3;
pub const NFT_GOTO: i32 = -4;
pub const NFT_RETURN: i32 = -5;

// enum nf_tables_msg_types
pub const NFT_MSG_NEWTABLE: u16 = 0;
pub const NFT_MSG_GETTABLE: u16 = 1;
pub const NFT_MSG_DELTABLE: u16 = 2;
pub const NFT_MSG_NEWCHAIN: u16 = 3;
pub const NFT_MSG_GETCHAIN: u16 = 4;
pub const NFT_MSG_DELCHAIN: u16 = 5;
pub const NFT_MSG_NEWRULE: u16 = 6;
pub const NFT_MSG_GETRULE: u16 = 7;
pub const NFT_MSG_DELRULE: u16 = 8;
pub const NFT_MSG_NEWSET: u16 = 9;
pub const NFT_MSG_GETSET: u16 = 10;
pub const NFT_MSG_DELSET: u16 = 11;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
pub const NFT_MSG_DELSETELEM: u16 = 14;
pub const NFT_MSG_NEWGEN: u16 = 15;
pub const NFT_MSG_GETGEN: u16 = 16;
pub const NFT_MSG_TRACE: u16 = 17;
pub const NFT_MSG_NEWOBJ: u16 = 18;
pub const NFT_MSG_GETOBJ: u16 = 19;
pub const NFT_MSG_DELOBJ: u16 = 20;
pub const NFT_MSG_GETOBJ_RESET: u16 = 21;
pub const NFT_MSG_NEWFLOWTABLE: u16 = 22;
pub const NFT_MSG_GETFLOWTABLE: u16 = 23;
pub const NFT_MSG_DELFLOWTABLE: u16 = 24;
pub const NFT_MSG_MAX: u16 = 25;

// enum nft_list_attributes
pub const NFTA_LIST_UNSPEC: u16 = 0;
pub const NFTA_LIST_ELEM: u16 = 1;

// enum nft_hook_attributes
pub const NFTA_HOOK_UNSPEC: u16 = 0;
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;
pub const NFTA_HOOK_DEV: u16 = 3;
pub const NFTA_HOOK_DEVS: u16 = 4;

// enum nft_table_flags
pub const NFT_TABLE_F_DORMANT: u32 = 1;
pub const NFT_TABLE_F_OWNER: u32 = 2;

// enum nft_table_attributes
pub const NFTA_TABLE_UNSPEC: u16 = 0;
pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_TABLE_FLAGS: u16 = 2;
pub const NFTA_TABLE_USE: u16 = 3;
pub const NFTA_TABLE_HANDLE: u16 = 4;
pub const NFTA_TABLE_PAD: u16 = 5;
pub const NFTA_TABLE_USERDATA: u16 = 6;
pub const NFTA_TABLE_OWNER: u16 = 7;

// enum nft_chain_flags
pub const NFT_CHAIN_BASE: u32 = 1;
pub const NFT_CHAIN_HW_OFFLOAD: u32 = 2;
pub const NFT_CHAIN_BINDING: u32 = 4;

// enum nft_chain_attributes
pub const NFTA_CHAIN_UNSPEC: u16 = 0;
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_HANDLE: u16 = 2;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_CHAIN_USE: u16 = 6;
pub const NFTA_CHAIN_TYPE: u16 = 7;
pub const NFTA_CHAIN_COUNTERS: u16 = 8;
pub const NFTA_CHAIN_PAD: u16 = 9;
pub const NFTA_CHAIN_FLAGS: u16 = 10;
pub const NFTA_CHAIN_ID: u16 = 11;
pub const NFTA_CHAIN_USERDATA: u16 = 12;

// enum nft_rule_attributes
pub const NFTA_RULE_UNSPEC: u16 = 0;
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_RULE_COMPAT: u16 = 5;
pub const NFTA_RULE_POSITION: u16 = 6;
pub const NFTA_RULE_USERDATA: u16 = 7;
pub const NFTA_RULE_PAD: u16 = 8;
pub const NFTA_RULE_ID: u16 = 9;
pub const NFTA_RULE_POSITION_ID: u16 = 10;
pub const NFTA_RULE_CHAIN_ID: u16 = 11;

// enum nft_rule_compat_flags
pub const NFT_RULE_COMPAT_F_UNUSED: u32 = 1;
pub const NFT_RULE_COMPAT_F_INV: u32 = 2;
pub const NFT_RULE_COMPAT_F_MASK: u32 = 2;

// enum nft_rule_compat_attributes
pub const NFTA_RULE_COMPAT_UNSPEC: u16 = 0;
pub const NFTA_RULE_COMPAT_PROTO: u16 = 1;
pub const NFTA_RULE_COMPAT_FLAGS: u16 = 2;

// enum nft_set_flags
pub const NFT_SET_ANONYMOUS: u32 = 1;
pub const NFT_SET_CONSTANT: u32 = 2;
pub const NFT_SET_INTERVAL: u32 = 4;
pub const NFT_SET_MAP: u32 = 8;
pub const NFT_SET_TIMEOUT: u32 = 16;
pub const NFT_SET_EVAL: u32 = 32;
pub const NFT_SET_OBJECT: u32 = 64;
pub const NFT_SET_CONCAT: u32 = 128;
pub const NFT_SET_EXPR: u32 = 256;

// enum nft_set_policies
pub const NFT_SET_POL_PERFORMANCE: u32 = 0;
pub const NFT_SET_POL_MEMORY: u32 = 1;

// enum nft_set_desc_attributes
pub const NFTA_SET_DESC_UNSPEC: u16 = 0;
pub const NFTA_SET_DESC_SIZE: u16 = 1;
pub const NFTA_SET_DESC_CONCAT: u16 = 2;

// enum nft_set_field_attributes
pub const NFTA_SET_FIELD_UNSPEC: u16 = 0;
pub const NFTA_SET_FIELD_LEN: u16 = 1;

// enum nft_set_attributes
pub const NFTA_SET_UNSPEC: u16 = 0;
pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_KEY_TYPE: u16 = 4;
pub const NFTA_SET_KEY_LEN: u16 = 5;
pub const NFTA_SET_DATA_TYPE: u16 = 6;
pub const NFTA_SET_DATA_LEN: u16 = 7;
pub const NFTA_SET_POLICY: u16 = 8;
pub const NFTA_SET_DESC: u16 = 9;
pub const NFTA_SET_ID: u16 = 10;
pub const NFTA_SET_TIMEOUT: u16 = 11;
pub const NFTA_SET_GC_INTERVAL: u16 = 12;
pub const NFTA_SET_USERDATA: u16 = 13;
pub const NFTA_SET_PAD: u16 = 14;
pub const NFTA_SET_OBJ_TYPE: u16 = 15;
pub const NFTA_SET_HANDLE: u16 = 16;
pub const NFTA_SET_EXPR: u16 = 17;
pub const NFTA_SET_EXPRESSIONS: u16 = 18;

// enum nft_set_elem_flags
pub const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
pub const NFT_SET_ELEM_CATCHALL: u32 = 2;

// enum nft_set_elem_attributes
pub const NFTA_SET_ELEM_UNSPEC: u16 = 0;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_FLAGS: u16 = 3;
pub const NFTA_SET_ELEM_TIMEOUT: u16 = 4;
pub const NFTA_SET_ELEM_EXPIRATION: u16 = 5;
pub const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub const NFTA_SET_ELEM_EXPR: u16 = 7;
pub const NFTA_SET_ELEM_PAD: u16 = 8;
pub const NFTA_SET_ELEM_OBJREF: u16 = 9;
pub const NFTA_SET_ELEM_KEY_END: u16 = 10;
pub const NFTA_SET_ELEM_EXPRESSIONS: u16 = 11;

// enum nft_set_elem_list_attributes
pub const NFTA_SET_ELEM_LIST_UNSPEC: u16 = 0;
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;

// enum nft_data_types
pub const NFT_DATA_VALUE: u32 = 0;
pub const NFT_DATA_VERDICT: u32 = 4294967040;

// enum nft_data_attributes
pub const NFTA_DATA_UNSPEC: u16 = 0;
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;

// enum nft_verdict_attributes
pub const NFTA_VERDICT_UNSPEC: u16 = 0;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;
pub const NFTA_VERDICT_CHAIN_ID: u16 = 3;

// enum nft_expr_attributes
pub const NFTA_EXPR_UNSPEC: u16 = 0;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;

// enum nft_immediate_attributes
pub const NFTA_IMMEDIATE_UNSPEC: u16 = 0;
pub const NFTA_IMMEDIATE_DREG: u16 = 1;
pub const NFTA_IMMEDIATE_DATA: u16 = 2;

// enum nft_bitwise_ops
pub const NFT_BITWISE_MASK_XOR: u32 = 0;
pub const NFT_BITWISE_LSHIFT: u32 = 1;
pub const NFT_BITWISE_RSHIFT: u32 = 2;

// enum nft_bitwise_attributes
pub const NFTA_BITWISE_UNSPEC: u16 = 0;
pub const NFTA_BITWISE_SREG: u16 = 1;
pub const NFTA_BITWISE_DREG: u16 = 2;
pub const NFTA_BITWISE_LEN: u16 = 3;
pub const NFTA_BITWISE_MASK: u16 = 4;
pub const NFTA_BITWISE_XOR: u16 = 5;
pub const NFTA_BITWISE_OP: u16 = 6;
pub const NFTA_BITWISE_DATA: u16 = 7;

// enum nft_byteorder_ops
pub const NFT_BYTEORDER_NTOH: u32 = 0;
pub const NFT_BYTEORDER_HTON: u32 = 1;

// enum nft_byteorder_attributes
pub const NFTA_BYTEORDER_UNSPEC: u16 = 0;
pub const NFTA_BYTEORDER_SREG: u16 = 1;
pub const NFTA_BYTEORDER_DREG: u16 = 2;
pub const NFTA_BYTEORDER_OP: u16 = 3;
pub const NFTA_BYTEORDER_LEN: u16 = 4;
pub const NFTA_BYTEORDER_SIZE: u16 = 5;

// enum nft_cmp_ops
pub const NFT_CMP_EQ: u32 = 0;
pub const NFT_CMP_NEQ: u32 = 1;
pub const NFT_CMP_LT: u32 = 2;
pub const NFT_CMP_LTE: u32 = 3;
pub const NFT_CMP_GT: u32 = 4;
pub const NFT_CMP_GTE: u32 = 5;

// enum nft_cmp_attributes
pub const NFTA_CMP_UNSPEC: u16 = 0;
pub const NFTA_CMP_SREG: u16 = 1;
pub const NFTA_CMP_OP: u16 = 2;
pub const NFTA_CMP_DATA: u16 = 3;

// enum nft_range_ops
pub const NFT_RANGE_EQ: u32 = 0;
pub const NFT_RANGE_NEQ: u32 = 1;

// enum nft_range_attributes
pub const NFTA_RANGE_UNSPEC: u16 = 0;
pub const NFTA_RANGE_SREG: u16 = 1;
pub const NFTA_RANGE_OP: u16 = 2;
pub const NFTA_RANGE_FROM_DATA: u16 = 3;
pub const NFTA_RANGE_TO_DATA: u16 = 4;

// enum nft_lookup_flags
pub const NFT_LOOKUP_F_INV: u32 = 1;

// enum nft_lookup_attributes
pub const NFTA_LOOKUP_UNSPEC: u16 = 0;
pub const NFTA_LOOKUP_SET: u16 = 1;
pub const NFTA_LOOKUP_SREG: u16 = 2;
pub const NFTA_LOOKUP_DREG: u16 = 3;
pub const NFTA_LOOKUP_SET_ID: u16 = 4;
pub const NFTA_LOOKUP_FLAGS: u16 = 5;

// enum nft_dynset_ops
pub const NFT_DYNSET_OP_ADD: u32 = 0;
pub const NFT_DYNSET_OP_UPDATE: u32 = 1;
pub const NFT_DYNSET_OP_DELETE: u32 = 2;

// enum nft_dynset_flags
pub const NFT_DYNSET_F_INV: u32 = 1;
pub const NFT_DYNSET_F_EXPR: u32 = 2;

// enum nft_dynset_attributes
pub const NFTA_DYNSET_UNSPEC: u16 = 0;
pub const NFTA_DYNSET_SET_NAME: u16 = 1;
pub const NFTA_DYNSET_SET_ID: u16 = 2;
pub const NFTA_DYNSET_OP: u16 = 3;
pub const NFTA_DYNSET_SREG_KEY: u16 = 4;
pub const NFTA_DYNSET_SREG_DATA: u16 = 5;
pub const NFTA_DYNSET_TIMEOUT: u16 = 6;
pub const NFTA_DYNSET_EXPR: u16 = 7;
pub const NFTA_DYNSET_PAD: u16 = 8;
pub const NFTA_DYNSET_FLAGS: u16 = 9;
pub const NFTA_DYNSET_EXPRESSIONS: u16 = 10;

// enum nft_payload_bases
pub const NFT_PAYLOAD_LL_HEADER: u32 = 0;
pub const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
pub const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
pub const NFT_PAYLOAD_INNER_HEADER: u32 = 3;

// enum nft_payload_csum_types
pub const NFT_PAYLOAD_CSUM_NONE: u32 = 0;
pub const NFT_PAYLOAD_CSUM_INET: u32 = 1;
pub const NFT_PAYLOAD_CSUM_SCTP: u32 = 2;

// enum nft_payload_csum_flags
pub const NFT_PAYLOAD_L4CSUM_PSEUDOHDR: u32 = 1;

// enum nft_payload_attributes
pub const NFTA_PAYLOAD_UNSPEC: u16 = 0;
pub const NFTA_PAYLOAD_DREG: u16 = 1;
pub const NFTA_PAYLOAD_BASE: u16 = 2;
pub const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub const NFTA_PAYLOAD_LEN: u16 = 4;
pub const NFTA_PAYLOAD_SREG: u16 = 5;
pub const NFTA_PAYLOAD_CSUM_TYPE: u16 = 6;
pub const NFTA_PAYLOAD_CSUM_OFFSET: u16 = 7;
pub const NFTA_PAYLOAD_CSUM_FLAGS: u16 = 8;

// enum nft_exthdr_flags
pub const NFT_EXTHDR_F_PRESENT: u32 = 1;

// enum nft_exthdr_op
pub const NFT_EXTHDR_OP_IPV6: u32 = 0;
pub const NFT_EXTHDR_OP_TCPOPT: u32 = 1;
pub const NFT_EXTHDR_OP_IPV4: u32 = 2;
pub const NFT_EXTHDR_OP_SCTP: u32 = 3;
pub const NFT_EXTHDR_OP_DCCP: u32 = 4;

// enum nft_exthdr_attributes
pub const NFTA_EXTHDR_UNSPEC: u16 = 0;
pub const NFTA_EXTHDR_DREG: u16 = 1;
pub const NFTA_EXTHDR_TYPE: u16 = 2;
pub const NFTA_EXTHDR_OFFSET: u16 = 3;
pub const NFTA_EXTHDR_LEN: u16 = 4;
pub const NFTA_EXTHDR_FLAGS: u16 = 5;
pub const NFTA_EXTHDR_OP: u16 = 6;
pub const NFTA_EXTHDR_SREG: u16 = 7;

// enum nft_meta_keys
pub const NFT_META_LEN: u32 = 0;
pub const NFT_META_PROTOCOL: u32 = 1;
pub const NFT_META_PRIORITY: u32 = 2;
pub const NFT_META_MARK: u32 = 3;
pub const NFT_META_IIF: u32 = 4;
pub const NFT_META_OIF: u32 = 5;
pub const NFT_META_IIFNAME: u32 = 6;
pub const NFT_META_OIFNAME: u32 = 7;
pub const NFT_META_IFTYPE: u32 = 8;
pub const NFT_META_OIFTYPE: u32 = 9;
pub const NFT_META_SKUID: u32 = 10;
pub const NFT_META_SKGID: u32 = 11;
pub const NFT_META_NFTRACE: u32 = 12;
pub const NFT_META_RTCLASSID: u32 = 13;
pub const NFT_META_SECMARK: u32 = 14;
pub const NFT_META_NFPROTO: u32 = 15;
pub const NFT_META_L4PROTO: u32 = 16;
pub const NFT_META_BRI_IIFNAME: u32 = 17;
pub const NFT_META_BRI_OIFNAME: u32 = 18;
pub const NFT_META_PKTTYPE: u32 = 19;
pub const NFT_META_CPU: u32 = 20;
pub const NFT_META_IIFGROUP: u32 = 21;
pub const NFT_META_OIFGROUP: u32 = 22;
pub const NFT_META_CGROUP: u32 = 23;
pub const NFT_META_PRANDOM: u32 = 24;
pub const NFT_META_SECPATH: u32 = 25;
pub const NFT_META_IIFKIND: u32 = 26;
pub const NFT_META_OIFKIND: u32 = 27;
pub const NFT_META_BRI_IIFPVID: u32 = 28;
pub const NFT_META_BRI_IIFVPROTO: u32 = 29;
pub const NFT_META_TIME_NS: u32 = 30;
pub const NFT_META_TIME_DAY: u32 = 31;
pub const NFT_META_TIME_HOUR: u32 = 32;
pub const NFT_META_SDIF: u32 = 33;
pub const NFT_META_SDIFNAME: u32 = 34;

// enum nft_rt_keys
pub const NFT_RT_CLASSID: u32 = 0;
pub const NFT_RT_NEXTHOP4: u32 = 1;
pub const NFT_RT_NEXTHOP6: u32 = 2;
pub const NFT_RT_TCPMSS: u32 = 3;
pub const NFT_RT_XFRM: u32 = 4;

// enum nft_hash_types
pub const NFT_HASH_JENKINS: u32 = 0;
pub const NFT_HASH_SYM: u32 = 1;

// enum nft_hash_attributes
pub const NFTA_HASH_UNSPEC: u16 = 0;
pub const NFTA_HASH_SREG: u16 = 1;
pub const NFTA_HASH_DREG: u16 = 2;
pub const NFTA_HASH_LEN: u16 = 3;
pub const NFTA_HASH_MODULUS: u16 = 4;
pub const NFTA_HASH_SEED: u16 = 5;
pub const NFTA_HASH_OFFSET: u16 = 6;
pub const NFTA_HASH_TYPE: u16 = 7;
pub const NFTA_HASH_SET_NAME: u16 = 8;
pub const NFTA_HASH_SET_ID: u16 = 9;

// enum nft_meta_attributes
pub const NFTA_META_UNSPEC: u16 = 0;
pub const NFTA_META_DREG: u16 = 1;
pub const NFTA_META_KEY: u16 = 2;
pub const NFTA_META_SREG: u16 = 3;

// enum nft_rt_attributes
pub const NFTA_RT_UNSPEC: u16 = 0;
pub const NFTA_RT_DREG: u16 = 1;
pub const NFTA_RT_KEY: u16 = 2;

// enum nft_socket_attributes
pub const NFTA_SOCKET_UNSPEC: u16 = 0;
pub const NFTA_SOCKET_KEY: u16 = 1;
pub const NFTA_SOCKET_DREG: u16 = 2;
pub const NFTA_SOCKET_LEVEL: u16 = 3;

// enum nft_socket_keys
pub const NFT_SOCKET_TRANSPARENT: u32 = 0;
pub const NFT_SOCKET_MARK: u32 = 1;
pub const NFT_SOCKET_WILDCARD: u32 = 2;
pub const NFT_SOCKET_CGROUPV2: u32 = 3;

// enum nft_ct_keys
pub const NFT_CT_STATE: u32 = 0;
pub const NFT_CT_DIRECTION: u32 = 1;
pub const NFT_CT_STATUS: u32 = 2;
pub const NFT_CT_MARK: u32 = 3;
pub const NFT_CT_SECMARK: u32 = 4;
pub const NFT_CT_EXPIRATION: u32 = 5;
pub const NFT_CT_HELPER: u32 = 6;
pub const NFT_CT_L3PROTOCOL: u32 = 7;
pub const NFT_CT_SRC: u32 = 8;
pub const NFT_CT_DST: u32 = 9;
pub const NFT_CT_PROTOCOL: u32 = 10;
pub const NFT_CT_PROTO_SRC: u32 = 11;
pub const NFT_CT_PROTO_DST: u32 = 12;
pub const NFT_CT_LABELS: u32 = 13;
pub const NFT_CT_PKTS: u32 = 14;
pub const NFT_CT_BYTES: u32 = 15;
pub const NFT_CT_AVGPKT: u32 = 16;
pub const NFT_CT_ZONE: u32 = 17;
pub const NFT_CT_EVENTMASK: u32 = 18;
pub const NFT_CT_SRC_IP: u32 = 19;
pub const NFT_CT_DST_IP: u32 = 20;
pub const NFT_CT_SRC_IP6: u32 = 21;
pub const NFT_CT_DST_IP6: u32 = 22;
pub const NFT_CT_ID: u32 = 23;

// enum nft_ct_attributes
pub const NFTA_CT_UNSPEC: u16 = 0;
pub const NFTA_CT_DREG: u16 = 1;
pub const NFTA_CT_KEY: u16 = 2;
pub const NFTA_CT_DIRECTION: u16 = 3;
pub const NFTA_CT_SREG: u16 = 4;

// enum nft_offload_attributes
pub const NFTA_FLOW_UNSPEC: u16 = 0;
pub const NFTA_FLOW_TABLE_NAME: u16 = 1;

// enum nft_limit_type
pub const NFT_LIMIT_PKTS: u32 = 0;
pub const NFT_LIMIT_PKT_BYTES: u32 = 1;

// enum nft_limit_flags
pub const NFT_LIMIT_F_INV: u32 = 1;

// enum nft_limit_attributes
pub const NFTA_LIMIT_UNSPEC: u16 = 0;
pub const NFTA_LIMIT_RATE: u16 = 1;
pub const NFTA_LIMIT_UNIT: u16 = 2;
pub const NFTA_LIMIT_BURST: u16 = 3;
pub const NFTA_LIMIT_TYPE: u16 = 4;
pub const NFTA_LIMIT_FLAGS: u16 = 5;
pub const NFTA_LIMIT_PAD: u16 = 6;

// enum nft_connlimit_flags
pub const NFT_CONNLIMIT_F_INV: u32 = 1;

// enum nft_connlimit_attributes
pub const NFTA_CONNLIMIT_UNSPEC: u16 = 0;
pub const NFTA_CONNLIMIT_COUNT: u16 = 1;
pub const NFTA_CONNLIMIT_FLAGS: u16 = 2;

// enum nft_counter_attributes
pub const NFTA_COUNTER_UNSPEC: u16 = 0;
pub const NFTA_COUNTER_BYTES: u16 = 1;
pub const NFTA_COUNTER_PACKETS: u16 = 2;
pub const NFTA_COUNTER_PAD: u16 = 3;

// enum nft_last_attributes
pub const NFTA_LAST_UNSPEC: u16 = 0;
pub const NFTA_LAST_SET: u16 = 1;
pub const NFTA_LAST_MSECS: u16 = 2;
pub const NFTA_LAST_PAD: u16 = 3;

// enum nft_log_attributes
pub const NFTA_LOG_UNSPEC: u16 = 0;
pub const NFTA_LOG_GROUP: u16 = 1;
pub const NFTA_LOG_PREFIX: u16 = 2;
pub const NFTA_LOG_SNAPLEN: u16 = 3;
pub const NFTA_LOG_QTHRESHOLD: u16 = 4;
pub const NFTA_LOG_LEVEL: u16 = 5;
pub const NFTA_LOG_FLAGS: u16 = 6;

// enum nft_log_level
pub const NFT_LOGLEVEL_EMERG: u32 = 0;
pub const NFT_LOGLEVEL_ALERT: u32 = 1;
pub const NFT_LOGLEVEL_CRIT: u32 = 2;
pub const NFT_LOGLEVEL_ERR: u32 = 3;
pub const NFT_LOGLEVEL_WARNING: u32 = 4;
pub const NFT_LOGLEVEL_NOTICE: u32 = 5;
pub const NFT_LOGLEVEL_INFO: u32 = 6;
pub const NFT_LOGLEVEL_DEBUG: u32 = 7;
pub const NFT_LOGLEVEL_AUDIT: u32 = 8;

// enum nft_queue_attributes
pub const NFTA_QUEUE_UNSPEC: u16 = 0;
pub const NFTA_QUEUE_NUM: u16 = 1;
pub const NFTA_QUEUE_TOTAL: u16 = 2;
pub const NFTA_QUEUE_FLAGS: u16 = 3;
pub const NFTA_QUEUE_SREG_QNUM: u16 = 4;

// enum nft_quota_flags
pub const NFT_QUOTA_F_INV: u32 = 1;
pub const NFT_QUOTA_F_DEPLETED: u32 = 2;

// enum nft_quota_attributes
pub const NFTA_QUOTA_UNSPEC: u16 = 0;
pub const NFTA_QUOTA_BYTES: u16 = 1;
pub const NFTA_QUOTA_FLAGS: u16 = 2;
pub const NFTA_QUOTA_PAD: u16 = 3;
pub const NFTA_QUOTA_CONSUMED: u16 = 4;

// enum nft_secmark_attributes
pub const NFTA_SECMARK_UNSPEC: u16 = 0;
pub const NFTA_SECMARK_CTX: u16 = 1;

// enum nft_reject_types
pub const NFT_REJECT_ICMP_UNREACH: u32 = 0;
pub const NFT_REJECT_TCP_RST: u32 = 1;
pub const NFT_REJECT_ICMPX_UNREACH: u32 = 2;

// enum nft_reject_inet_code
pub const NFT_REJECT_ICMPX_NO_ROUTE: u32 = 0;
pub const NFT_REJECT_ICMPX_PORT_UNREACH: u32 = 1;
pub const NFT_REJECT_ICMPX_HOST_UNREACH: u32 = 2;
pub const NFT_REJECT_ICMPX_ADMIN_PROHIBITED: u32 = 3;

// enum nft_reject_attributes
pub const NFTA_REJECT_UNSPEC: u16 = 0;
pub const NFTA_REJECT_TYPE: u16 = 1;
pub const NFTA_REJECT_ICMP_CODE: u16 = 2;

// enum nft_nat_types
pub const NFT_NAT_SNAT: u32 = 0;
pub const NFT_NAT_DNAT: u32 = 1;

// enum nft_nat_attributes
pub const NFTA_NAT_UNSPEC: u16 = 0;
pub const NFTA_NAT_TYPE: u16 = 1;
pub const NFTA_NAT_FAMILY: u16 = 2;
pub const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
pub const NFTA_NAT_REG_ADDR_MAX: u16 = 4;
pub const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
pub const NFTA_NAT_REG_PROTO_MAX: u16 = 6;
pub const NFTA_NAT_FLAGS: u16 = 7;

// enum nft_tproxy_attributes
pub const NFTA_TPROXY_UNSPEC: u16 = 0;
pub const NFTA_TPROXY_FAMILY: u16 = 1;
pub const NFTA_TPROXY_REG_ADDR: u16 = 2;
pub const NFTA_TPROXY_REG_PORT: u16 = 3;

// enum nft_masq_attributes
pub const NFTA_MASQ_UNSPEC: u16 = 0;
pub const NFTA_MASQ_FLAGS: u16 = 1;
pub const NFTA_MASQ_REG_PROTO_MIN: u16 = 2;
pub const NFTA_MASQ_REG_PROTO_MAX: u16 = 3;

// enum nft_redir_attributes
pub const NFTA_REDIR_UNSPEC: u16 = 0;
pub const NFTA_REDIR_REG_PROTO_MIN: u16 = 1;
pub const NFTA_REDIR_REG_PROTO_MAX: u16 = 2;
pub const NFTA_REDIR_FLAGS: u16 = 3;

// enum nft_dup_attributes
pub const NFTA_DUP_UNSPEC: u16 = 0;
pub const NFTA_DUP_SREG_ADDR: u16 = 1;
pub const NFTA_DUP_SREG_DEV: u16 = 2;

// enum nft_fwd_attributes
pub const NFTA_FWD_UNSPEC: u16 = 0;
pub const NFTA_FWD_SREG_DEV: u16 = 1;
pub const NFTA_FWD_SREG_ADDR: u16 = 2;
pub const NFTA_FWD_NFPROTO: u16 = 3;

// enum nft_objref_attributes
pub const NFTA_OBJREF_UNSPEC: u16 = 0;
pub const NFTA_OBJREF_IMM_TYPE: u16 = 1;
pub const NFTA_OBJREF_IMM_NAME: u16 = 2;
pub const NFTA_OBJREF_SET_SREG: u16 = 3;
pub const NFTA_OBJREF_SET_NAME: u16 = 4;
pub const NFTA_OBJREF_SET_ID: u16 = 5;

// enum nft_gen_attributes
pub const NFTA_GEN_UNSPEC: u16 = 0;
pub const NFTA_GEN_ID: u16 = 1;
pub const NFTA_GEN_PROC_PID: u16 = 2;
pub const NFTA_GEN_PROC_NAME: u16 = 3;

// enum nft_fib_attributes
pub const NFTA_FIB_UNSPEC: u16 = 0;
pub const NFTA_FIB_DREG: u16 = 1;
pub const NFTA_FIB_RESULT: u16 = 2;
pub const NFTA_FIB_FLAGS: u16 = 3;

// enum nft_fib_result
pub const NFT_FIB_RESULT_UNSPEC: u32 = 0;
pub const NFT_FIB_RESULT_OIF: u32 = 1;
pub const NFT_FIB_RESULT_OIFNAME: u32 = 2;
pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;

// enum nft_fib_flags
pub const NFTA_FIB_F_SADDR: u16 = 1;
pub const NFTA_FIB_F_DADDR: u16 = 2;
pub const NFTA_FIB_F_MARK: u16 = 4;
pub const NFTA_FIB_F_IIF: u16 = 8;
pub const NFTA_FIB_F_OIF: u16 = 16;
pub const NFTA_FIB_F_PRESENT: u16 = 32;

// enum nft_ct_helper_attributes
pub const NFTA_CT_HELPER_UNSPEC: u16 = 0;
pub const NFTA_CT_HELPER_NAME: u16 = 1;
pub const NFTA_CT_HELPER_L3PROTO: u16 = 2;
pub const NFTA_CT_HELPER_L4PROTO: u16 = 3;

// enum nft_ct_timeout_timeout_attributes
pub const NFTA_CT_TIMEOUT_UNSPEC: u16 = 0;
pub const NFTA_CT_TIMEOUT_L3PROTO: u16 = 1;
pub const NFTA_CT_TIMEOUT_L4PROTO: u16 = 2;
pub const NFTA_CT_TIMEOUT_DATA: u16 = 3;

// enum nft_ct_expectation_attributes
pub const NFTA_CT_EXPECT_UNSPEC: u16 = 0;
pub const NFTA_CT_EXPECT_L3PROTO: u16 = 1;
pub const NFTA_CT_EXPECT_L4PROTO: u16 = 2;
pub const NFTA_CT_EXPECT_DPORT: u16 = 3;
pub const NFTA_CT_EXPECT_TIMEOUT: u16 = 4;
pub const NFTA_CT_EXPECT_SIZE: u16 = 5;

// enum nft_object_attributes
pub const NFTA_OBJ_UNSPEC: u16 = 0;
pub const NFTA_OBJ_TABLE: u16 = 1;
pub const NFTA_OBJ_NAME: u16 = 2;
pub const NFTA_OBJ_TYPE: u16 = 3;
pub const NFTA_OBJ_DATA: u16 = 4;
pub const NFTA_OBJ_USE: u16 = 5;
pub const NFTA_OBJ_HANDLE: u16 = 6;
pub const NFTA_OBJ_PAD: u16 = 7;
pub const NFTA_OBJ_USERDATA: u16 = 8;

// enum nft_flowtable_flags
pub const NFT_FLOWTABLE_HW_OFFLOAD: u32 = 1;
pub const NFT_FLOWTABLE_COUNTER: u32 = 2;
pub const NFT_FLOWTABLE_MASK: u32 = 3;

// enum nft_flowtable_attributes
pub const NFTA_FLOWTABLE_UNSPEC: u16 = 0;
pub const NFTA_FLOWTABLE_TABLE: u16 = 1;
pub const NFTA_FLOWTABLE_NAME: u16 = 2;
pub const NFTA_FLOWTABLE_HOOK: u16 = 3;
pub const NFTA_FLOWTABLE_USE: u16 = 4;
pub const NFTA_FLOWTABLE_HANDLE: u16 = 5;
pub const NFTA_FLOWTABLE_PAD: u16 = 6;
pub const NFTA_FLOWTABLE_FLAGS: u16 = 7;

// enum nft_flowtable_hook_attributes
pub const NFTA_FLOWTABLE_HOOK_UNSPEC: u16 = 0;
pub const NFTA_FLOWTABLE_HOOK_NUM: u16 = 1;
pub const NFTA_FLOWTABLE_HOOK_PRIORITY: u16 = 2;
pub const NFTA_FLOWTABLE_HOOK_DEVS: u16 = 3;

// enum nft_osf_attributes
pub const NFTA_OSF_UNSPEC: u16 = 0;
pub const NFTA_OSF_DREG: u16 = 1;
pub const NFTA_OSF_TTL: u16 = 2;
pub const NFTA_OSF_FLAGS: u16 = 3;

// enum nft_osf_flags
pub const NFT_OSF_F_VERSION: u32 = 1;

// enum nft_synproxy_attributes
pub const NFTA_SYNPROXY_UNSPEC: u16 = 0;
pub const NFTA_SYNPROXY_MSS: u16 = 1;
pub const NFTA_SYNPROXY_WSCALE: u16 = 2;
pub const NFTA_SYNPROXY_FLAGS: u16 = 3;

// enum nft_devices_attributes
pub const NFTA_DEVICE_UNSPEC: u16 = 0;
pub const NFTA_DEVICE_NAME: u16 = 1;

// enum nft_xfrm_attributes
pub const NFTA_XFRM_UNSPEC: u16 = 0;
pub const NFTA_XFRM_DREG: u16 = 1;
pub const NFTA_XFRM_KEY: u16 = 2;
pub const NFTA_XFRM_DIR: u16 = 3;
pub const NFTA_XFRM_SPNUM: u16 = 4;

// enum nft_xfrm_keys
pub const NFT_XFRM_KEY_UNSPEC: u32 = 0;
pub const NFT_XFRM_KEY_DADDR_IP4: u32 = 1;
pub const NFT_XFRM_KEY_DADDR_IP6: u32 = 2;
pub const NFT_XFRM_KEY_SADDR_IP4: u32 = 3;
pub const NFT_XFRM_KEY_SADDR_IP6: u32 = 4;
pub const NFT_XFRM_KEY_REQID: u32 = 5;
pub const NFT_XFRM_KEY_SPI: u32 = 6;

// enum nft_trace_attributes
pub const NFTA_TRACE_UNSPEC: u16 = 0;
pub const NFTA_TRACE_TABLE: u16 = 1;
pub const NFTA_TRACE_CHAIN: u16 = 2;
pub const NFTA_TRACE_RULE_HANDLE: u16 = 3;
pub const NFTA_TRACE_TYPE: u16 = 4;
pub const NFTA_TRACE_VERDICT: u16 = 5;
pub const NFTA_TRACE_ID: u16 = 6;
pub const NFTA_TRACE_LL_HEADER: u16 = 7;
pub const NFTA_TRACE_NETWORK_HEADER: u16 = 8;
pub const NFTA_TRACE_TRANSPORT_HEADER: u16 = 9;
pub const NFTA_TRACE_IIF: u16 = 10;
pub const NFTA_TRACE_IIFTYPE: u16 = 11;
pub const NFTA_TRACE_OIF: u16 = 12;
pub const NFTA_TRACE_OIFTYPE: u16 = 13;
pub const NFTA_TRACE_MARK: u16 = 14;
pub const NFTA_TRACE_NFPROTO: u16 = 15;
pub const NFTA_TRACE_POLICY: u16 = 16;
pub const NFTA_TRACE_PAD: u16 = 17;

// enum nft_trace_types
pub const NFT_TRACETYPE_UNSPEC: u32 = 0;
pub const NFT_TRACETYPE_POLICY: u32 = 1;
pub const NFT_TRACETYPE_RETURN: u32 = 2;
pub const NFT_TRACETYPE_RULE: u32 = 3;

// enum nft_ng_attributes
pub const NFTA_NG_UNSPEC: u16 = 0;
pub const NFTA_NG_DREG: u16 = 1;
pub const NFTA_NG_MODULUS: u16 = 2;
pub const NFTA_NG_TYPE: u16 = 3;
pub const NFTA_NG_OFFSET: u16 = 4;
pub const NFTA_NG_SET_NAME: u16 = 5;
pub const NFTA_NG_SET_ID: u16 = 6;

// enum nft_ng_types
pub const NFT_NG_INCREMENTAL: u32 = 0;
pub const NFT_NG_RANDOM: u32 = 1;

// enum nft_tunnel_key_ip_attributes
pub const NFTA_TUNNEL_KEY_IP_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_IP_SRC: u16 = 1;
pub const NFTA_TUNNEL_KEY_IP_DST: u16 = 2;

// enum nft_tunnel_ip6_attributes
pub const NFTA_TUNNEL_KEY_IP6_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_IP6_SRC: u16 = 1;
pub const NFTA_TUNNEL_KEY_IP6_DST: u16 = 2;
pub const NFTA_TUNNEL_KEY_IP6_FLOWLABEL: u16 = 3;

// enum nft_tunnel_opts_attributes
pub const NFTA_TUNNEL_KEY_OPTS_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_OPTS_VXLAN: u16 = 1;
pub const NFTA_TUNNEL_KEY_OPTS_ERSPAN: u16 = 2;
pub const NFTA_TUNNEL_KEY_OPTS_GENEVE: u16 = 3;

// enum nft_tunnel_opts_vxlan_attributes
pub const NFTA_TUNNEL_KEY_VXLAN_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_VXLAN_GBP: u16 = 1;

// enum nft_tunnel_opts_erspan_attributes
pub const NFTA_TUNNEL_KEY_ERSPAN_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_ERSPAN_VERSION: u16 = 1;
pub const NFTA_TUNNEL_KEY_ERSPAN_V1_INDEX: u16 = 2;
pub const NFTA_TUNNEL_KEY_ERSPAN_V2_HWID: u16 = 3;
pub const NFTA_TUNNEL_KEY_ERSPAN_V2_DIR: u16 = 4;

// enum nft_tunnel_opts_geneve_attributes
pub const NFTA_TUNNEL_KEY_GENEVE_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_GENEVE_CLASS: u16 = 1;
pub const NFTA_TUNNEL_KEY_GENEVE_TYPE: u16 = 2;
pub const NFTA_TUNNEL_KEY_GENEVE_DATA: u16 = 3;

// enum nft_tunnel_flags
pub const NFT_TUNNEL_F_ZERO_CSUM_TX: u32 = 1;
pub const NFT_TUNNEL_F_DONT_FRAGMENT: u32 = 2;
pub const NFT_TUNNEL_F_SEQ_NUMBER: u32 = 4;

// enum nft_tunnel_key_attributes
pub const NFTA_TUNNEL_KEY_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY_ID: u16 = 1;
pub const NFTA_TUNNEL_KEY_IP: u16 = 2;
pub const NFTA_TUNNEL_KEY_IP6: u16 = 3;
pub const NFTA_TUNNEL_KEY_FLAGS: u16 = 4;
pub const NFTA_TUNNEL_KEY_TOS: u16 = 5;
pub const NFTA_TUNNEL_KEY_TTL: u16 = 6;
pub const NFTA_TUNNEL_KEY_SPORT: u16 = 7;
pub const NFTA_TUNNEL_KEY_DPORT: u16 = 8;
pub const NFTA_TUNNEL_KEY_OPTS: u16 = 9;

// enum nft_tunnel_keys
pub const NFT_TUNNEL_PATH: u32 = 0;
pub const NFT_TUNNEL_ID: u32 = 1;

// enum nft_tunnel_mode
pub const NFT_TUNNEL_MODE_NONE: u32 = 0;
pub const NFT_TUNNEL_MODE_RX: u32 = 1;
pub const NFT_TUNNEL_MODE_TX: u32 = 2;

// enum nft_tunnel_attributes
pub const NFTA_TUNNEL_UNSPEC: u16 = 0;
pub const NFTA_TUNNEL_KEY: u16 = 1;
pub const NFTA_TUNNEL_DREG: u16 = 2;
pub const NFTA_TUNNEL_MODE: u16 = 3;

// linux/netfilter/nfnetlink.h
pub const NFNETLINK_V0: u8 = 0;
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub const NFNL_MSG_BATCH_END: u16 = 0x11;
// linux/netfilter.h NFPROTO_*
pub const NFPROTO_UNSPEC: u8 = 0;
pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;
// linux/netfilter.h verdicts
pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
// linux/netlink.h
pub const NLA_F_NESTED: u16 = 1 << 15;
pub const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
