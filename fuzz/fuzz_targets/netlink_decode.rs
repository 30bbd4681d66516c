//! Any bytes the kernel (or something impersonating it) sends back in a dump: splitting into
//! messages, decoding tables, chains, sets, elements and rules, and lifting rule expressions
//! into statements either succeed or return an error. Nothing panics.
#![no_main]

use std::collections::BTreeMap;

use kubenft::nft::model::Family;
use kubenft::netlink::socket;
use kubenft::nft::kernel::{decode, lift};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    // Whole datagrams, as the socket hands them over.
    if let Ok(messages) = socket::split_messages(rest) {
        for m in messages {
            let _ = m.error();
            let _ = m.nfgen();
        }
    }
    // One message's attributes, as each decoder receives them.
    match which % 5 {
        0 => drop(decode::table(rest)),
        1 => drop(decode::chain(rest)),
        2 => drop(decode::set(rest)),
        3 => drop(decode::set_elems(rest)),
        _ => {
            if let Ok(rule) = decode::rule(rest) {
                for family in [Family::Ip, Family::Ip6, Family::Inet] {
                    let _ = lift::lift_rule(family, &rule, &BTreeMap::new());
                }
            }
        }
    }
});
