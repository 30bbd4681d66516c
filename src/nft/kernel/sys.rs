//! Kernel constants from the nf_tables uapi header (linux-libc-dev `linux/netfilter/nf_tables.h`),
//! named exactly as there, with the header's values: the subset kubenft encodes or decodes. Add a
//! constant from the header when a new attribute or expression needs it.

// enum nft_registers
pub(crate) const NFT_REG_VERDICT: u32 = 0;
pub(crate) const NFT_REG_1: u32 = 1;
pub(crate) const NFT_REG_2: u32 = 2;
pub(crate) const NFT_REG_4: u32 = 4;
pub(crate) const NFT_REG32_00: u32 = 8;
pub(crate) const NFT_REG32_15: u32 = 23;

// enum nft_verdicts
pub(crate) const NFT_CONTINUE: i32 = -1;
pub(crate) const NFT_JUMP: i32 = -3;
pub(crate) const NFT_GOTO: i32 = -4;
pub(crate) const NFT_RETURN: i32 = -5;

// enum nf_tables_msg_types
pub const NFT_MSG_NEWTABLE: u16 = 0;
pub(crate) const NFT_MSG_GETTABLE: u16 = 1;
pub(crate) const NFT_MSG_DELTABLE: u16 = 2;
pub(crate) const NFT_MSG_NEWCHAIN: u16 = 3;
pub(crate) const NFT_MSG_GETCHAIN: u16 = 4;
pub(crate) const NFT_MSG_DELCHAIN: u16 = 5;
pub(crate) const NFT_MSG_NEWRULE: u16 = 6;
pub(crate) const NFT_MSG_GETRULE: u16 = 7;
pub(crate) const NFT_MSG_DELRULE: u16 = 8;
pub(crate) const NFT_MSG_NEWSET: u16 = 9;
pub(crate) const NFT_MSG_GETSET: u16 = 10;
pub(crate) const NFT_MSG_DELSET: u16 = 11;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
pub(crate) const NFT_MSG_DELSETELEM: u16 = 14;
pub(crate) const NFT_MSG_GETGEN: u16 = 16;

// enum nft_list_attributes
pub(crate) const NFTA_LIST_ELEM: u16 = 1;

// enum nft_hook_attributes
pub(crate) const NFTA_HOOK_HOOKNUM: u16 = 1;
pub(crate) const NFTA_HOOK_PRIORITY: u16 = 2;

// enum nft_table_flags
pub const NFT_TABLE_F_OWNER: u32 = 2;

// enum nft_table_attributes
pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_TABLE_FLAGS: u16 = 2;
pub(crate) const NFTA_TABLE_USERDATA: u16 = 6;

// enum nft_chain_attributes
pub(crate) const NFTA_CHAIN_TABLE: u16 = 1;
pub(crate) const NFTA_CHAIN_HANDLE: u16 = 2;
pub(crate) const NFTA_CHAIN_NAME: u16 = 3;
pub(crate) const NFTA_CHAIN_HOOK: u16 = 4;
pub(crate) const NFTA_CHAIN_POLICY: u16 = 5;
pub(crate) const NFTA_CHAIN_TYPE: u16 = 7;
pub(crate) const NFTA_CHAIN_USERDATA: u16 = 12;

// enum nft_rule_attributes
pub(crate) const NFTA_RULE_TABLE: u16 = 1;
pub(crate) const NFTA_RULE_CHAIN: u16 = 2;
pub(crate) const NFTA_RULE_HANDLE: u16 = 3;
pub(crate) const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub(crate) const NFTA_RULE_USERDATA: u16 = 7;

// enum nft_set_flags
pub(crate) const NFT_SET_ANONYMOUS: u32 = 1;
pub(crate) const NFT_SET_CONSTANT: u32 = 2;
pub(crate) const NFT_SET_INTERVAL: u32 = 4;
pub(crate) const NFT_SET_MAP: u32 = 8;
pub(crate) const NFT_SET_TIMEOUT: u32 = 16;
pub(crate) const NFT_SET_EVAL: u32 = 32;
pub(crate) const NFT_SET_CONCAT: u32 = 128;

// enum nft_set_desc_attributes
pub(crate) const NFTA_SET_DESC_SIZE: u16 = 1;
pub(crate) const NFTA_SET_DESC_CONCAT: u16 = 2;

// enum nft_set_field_attributes
pub(crate) const NFTA_SET_FIELD_LEN: u16 = 1;

// enum nft_set_attributes
pub(crate) const NFTA_SET_TABLE: u16 = 1;
pub(crate) const NFTA_SET_NAME: u16 = 2;
pub(crate) const NFTA_SET_FLAGS: u16 = 3;
pub(crate) const NFTA_SET_KEY_TYPE: u16 = 4;
pub(crate) const NFTA_SET_KEY_LEN: u16 = 5;
pub(crate) const NFTA_SET_DATA_TYPE: u16 = 6;
pub(crate) const NFTA_SET_DATA_LEN: u16 = 7;
pub(crate) const NFTA_SET_DESC: u16 = 9;
pub(crate) const NFTA_SET_ID: u16 = 10;
pub(crate) const NFTA_SET_TIMEOUT: u16 = 11;
pub(crate) const NFTA_SET_USERDATA: u16 = 13;

// enum nft_set_elem_flags
pub(crate) const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
pub(crate) const NFT_SET_ELEM_CATCHALL: u32 = 2;

// enum nft_set_elem_attributes
pub(crate) const NFTA_SET_ELEM_KEY: u16 = 1;
pub(crate) const NFTA_SET_ELEM_DATA: u16 = 2;
pub(crate) const NFTA_SET_ELEM_FLAGS: u16 = 3;
pub(crate) const NFTA_SET_ELEM_EXPIRATION: u16 = 5;
pub(crate) const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub(crate) const NFTA_SET_ELEM_KEY_END: u16 = 10;

// enum nft_set_elem_list_attributes
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub(crate) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub(crate) const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;

// enum nft_data_types
pub(crate) const NFT_DATA_VERDICT: u32 = 4294967040;

// enum nft_data_attributes
pub(crate) const NFTA_DATA_VALUE: u16 = 1;
pub(crate) const NFTA_DATA_VERDICT: u16 = 2;

// enum nft_verdict_attributes
pub(crate) const NFTA_VERDICT_CODE: u16 = 1;
pub(crate) const NFTA_VERDICT_CHAIN: u16 = 2;

// enum nft_expr_attributes
pub(crate) const NFTA_EXPR_NAME: u16 = 1;
pub(crate) const NFTA_EXPR_DATA: u16 = 2;

// enum nft_immediate_attributes
pub(crate) const NFTA_IMMEDIATE_DREG: u16 = 1;
pub(crate) const NFTA_IMMEDIATE_DATA: u16 = 2;

// enum nft_bitwise_ops
pub(crate) const NFT_BITWISE_MASK_XOR: u32 = 0;

// enum nft_bitwise_attributes
pub(crate) const NFTA_BITWISE_SREG: u16 = 1;
pub(crate) const NFTA_BITWISE_DREG: u16 = 2;
pub(crate) const NFTA_BITWISE_LEN: u16 = 3;
pub(crate) const NFTA_BITWISE_MASK: u16 = 4;
pub(crate) const NFTA_BITWISE_XOR: u16 = 5;
pub(crate) const NFTA_BITWISE_OP: u16 = 6;

// enum nft_byteorder_ops
pub(crate) const NFT_BYTEORDER_HTON: u32 = 1;

// enum nft_byteorder_attributes
pub(crate) const NFTA_BYTEORDER_SREG: u16 = 1;
pub(crate) const NFTA_BYTEORDER_DREG: u16 = 2;
pub(crate) const NFTA_BYTEORDER_OP: u16 = 3;
pub(crate) const NFTA_BYTEORDER_LEN: u16 = 4;
pub(crate) const NFTA_BYTEORDER_SIZE: u16 = 5;

// enum nft_cmp_ops
pub(crate) const NFT_CMP_EQ: u32 = 0;
pub(crate) const NFT_CMP_NEQ: u32 = 1;

// enum nft_cmp_attributes
pub(crate) const NFTA_CMP_SREG: u16 = 1;
pub(crate) const NFTA_CMP_OP: u16 = 2;
pub(crate) const NFTA_CMP_DATA: u16 = 3;

// enum nft_lookup_flags
pub(crate) const NFT_LOOKUP_F_INV: u32 = 1;

// enum nft_lookup_attributes
pub(crate) const NFTA_LOOKUP_SET: u16 = 1;
pub(crate) const NFTA_LOOKUP_SREG: u16 = 2;
pub(crate) const NFTA_LOOKUP_DREG: u16 = 3;
pub(crate) const NFTA_LOOKUP_SET_ID: u16 = 4;
pub(crate) const NFTA_LOOKUP_FLAGS: u16 = 5;

// enum nft_dynset_ops
pub(crate) const NFT_DYNSET_OP_UPDATE: u32 = 1;

// enum nft_dynset_attributes
pub(crate) const NFTA_DYNSET_SET_NAME: u16 = 1;
pub(crate) const NFTA_DYNSET_OP: u16 = 3;
pub(crate) const NFTA_DYNSET_SREG_KEY: u16 = 4;
pub(crate) const NFTA_DYNSET_SREG_DATA: u16 = 5;
pub(crate) const NFTA_DYNSET_TIMEOUT: u16 = 6;
pub(crate) const NFTA_DYNSET_EXPR: u16 = 7;
pub(crate) const NFTA_DYNSET_EXPRESSIONS: u16 = 10;

// enum nft_payload_bases
pub(crate) const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
pub(crate) const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;

// enum nft_payload_attributes
pub(crate) const NFTA_PAYLOAD_DREG: u16 = 1;
pub(crate) const NFTA_PAYLOAD_BASE: u16 = 2;
pub(crate) const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub(crate) const NFTA_PAYLOAD_LEN: u16 = 4;
pub(crate) const NFTA_PAYLOAD_SREG: u16 = 5;

// enum nft_meta_keys
pub(crate) const NFT_META_MARK: u32 = 3;
pub(crate) const NFT_META_IIFNAME: u32 = 6;
pub(crate) const NFT_META_OIFNAME: u32 = 7;
pub(crate) const NFT_META_NFPROTO: u32 = 15;
pub(crate) const NFT_META_L4PROTO: u32 = 16;

// enum nft_meta_attributes
pub(crate) const NFTA_META_DREG: u16 = 1;
pub(crate) const NFTA_META_KEY: u16 = 2;
pub(crate) const NFTA_META_SREG: u16 = 3;

// enum nft_ct_keys
pub(crate) const NFT_CT_STATE: u32 = 0;
pub(crate) const NFT_CT_STATUS: u32 = 2;

// enum nft_ct_attributes
pub(crate) const NFTA_CT_DREG: u16 = 1;
pub(crate) const NFTA_CT_KEY: u16 = 2;
pub(crate) const NFTA_CT_DIRECTION: u16 = 3;
pub(crate) const NFTA_CT_SREG: u16 = 4;

// enum nft_limit_type
pub(crate) const NFT_LIMIT_PKTS: u32 = 0;

// enum nft_limit_attributes
pub(crate) const NFTA_LIMIT_RATE: u16 = 1;
pub(crate) const NFTA_LIMIT_UNIT: u16 = 2;
pub(crate) const NFTA_LIMIT_BURST: u16 = 3;
pub(crate) const NFTA_LIMIT_TYPE: u16 = 4;
pub(crate) const NFTA_LIMIT_FLAGS: u16 = 5;

// enum nft_counter_attributes
pub(crate) const NFTA_COUNTER_BYTES: u16 = 1;
pub(crate) const NFTA_COUNTER_PACKETS: u16 = 2;

// enum nft_reject_types
pub(crate) const NFT_REJECT_ICMP_UNREACH: u32 = 0;
pub(crate) const NFT_REJECT_TCP_RST: u32 = 1;
pub(crate) const NFT_REJECT_ICMPX_UNREACH: u32 = 2;

// enum nft_reject_inet_code
pub(crate) const NFT_REJECT_ICMPX_PORT_UNREACH: u32 = 1;

// enum nft_reject_attributes
pub(crate) const NFTA_REJECT_TYPE: u16 = 1;
pub(crate) const NFTA_REJECT_ICMP_CODE: u16 = 2;

// enum nft_nat_types
pub(crate) const NFT_NAT_DNAT: u32 = 1;

// enum nft_nat_attributes
pub(crate) const NFTA_NAT_TYPE: u16 = 1;
pub(crate) const NFTA_NAT_FAMILY: u16 = 2;
pub(crate) const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
pub(crate) const NFTA_NAT_REG_ADDR_MAX: u16 = 4;
pub(crate) const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
pub(crate) const NFTA_NAT_REG_PROTO_MAX: u16 = 6;
pub(crate) const NFTA_NAT_FLAGS: u16 = 7;

// enum nft_masq_attributes
pub(crate) const NFTA_MASQ_FLAGS: u16 = 1;
pub(crate) const NFTA_MASQ_REG_PROTO_MIN: u16 = 2;

// enum nft_gen_attributes
pub(crate) const NFTA_GEN_ID: u16 = 1;

// enum nft_fib_attributes
pub(crate) const NFTA_FIB_DREG: u16 = 1;
pub(crate) const NFTA_FIB_RESULT: u16 = 2;
pub(crate) const NFTA_FIB_FLAGS: u16 = 3;

// enum nft_fib_result
pub(crate) const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;

// enum nft_fib_flags
pub(crate) const NFTA_FIB_F_SADDR: u16 = 1;
pub(crate) const NFTA_FIB_F_DADDR: u16 = 2;

// enum nft_ng_attributes
pub(crate) const NFTA_NG_DREG: u16 = 1;
pub(crate) const NFTA_NG_MODULUS: u16 = 2;
pub(crate) const NFTA_NG_TYPE: u16 = 3;
pub(crate) const NFTA_NG_OFFSET: u16 = 4;

// enum nft_ng_types
pub(crate) const NFT_NG_RANDOM: u32 = 1;

// enum nft_hash_types
pub(crate) const NFT_HASH_JENKINS: u32 = 0;

// enum nft_hash_attributes
pub(crate) const NFTA_HASH_SREG: u16 = 1;
pub(crate) const NFTA_HASH_DREG: u16 = 2;
pub(crate) const NFTA_HASH_LEN: u16 = 3;
pub(crate) const NFTA_HASH_MODULUS: u16 = 4;
pub(crate) const NFTA_HASH_SEED: u16 = 5;
pub(crate) const NFTA_HASH_OFFSET: u16 = 6;
pub(crate) const NFTA_HASH_TYPE: u16 = 7;

// linux/netfilter/nfnetlink.h
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
// linux/netfilter.h NFPROTO_*
pub(crate) const NFPROTO_UNSPEC: u8 = 0;
pub(crate) const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_IPV6: u8 = 10;
// linux/netfilter.h verdicts
pub(crate) const NF_DROP: i32 = 0;
pub(crate) const NF_ACCEPT: i32 = 1;
