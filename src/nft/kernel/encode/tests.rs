use super::set::typeof_udata;
use crate::nft::model::{DataType, Set};

fn endpoint_map(data: Vec<DataType>) -> Set {
    Set {
        interval: true,
        ..Set::map("m", vec![DataType::Integer], data)
    }
}

/// The bytes nft 1.0.6 sends for `typeof numgen random mod 1 : <data>` (read with
/// `nft --debug=mnl -f` on x86_64; the u32 values inside are host-endian): the listing is
/// only readable back when they match.
#[test]
#[cfg(target_endian = "little")]
fn an_integer_keyed_map_carries_the_typeof_description_nft_writes() {
    let cases: [(Vec<DataType>, &[u8]); 3] = [
        (
            vec![DataType::Ipv4Addr, DataType::InetService],
            &[
                0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 3, 26, 0, 4, 23, 0, 0, 0, 1, 18, 0, 4, 1, 0, 0,
                0, 1, 4, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 4, 52, 0, 4, 13, 0, 0, 0, 1, 44, 0, 20, 0,
                4, 7, 0, 0, 0, 1, 12, 0, 4, 12, 0, 0, 0, 1, 4, 12, 0, 0, 0, 1, 20, 0, 4, 7, 0, 0,
                0, 1, 12, 0, 4, 11, 0, 0, 0, 1, 4, 2, 0, 0, 0, 6, 4, 0, 0, 0, 0,
            ],
        ),
        (
            vec![DataType::Verdict],
            &[
                0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 3, 26, 0, 4, 23, 0, 0, 0, 1, 18, 0, 4, 1, 0, 0,
                0, 1, 4, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0, 6, 4, 0, 0, 0,
                0,
            ],
        ),
        (
            vec![DataType::Mark],
            &[
                0, 4, 1, 0, 0, 0, 1, 4, 1, 0, 0, 0, 3, 26, 0, 4, 23, 0, 0, 0, 1, 18, 0, 4, 1, 0, 0,
                0, 1, 4, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 4, 14, 0, 4, 9, 0, 0, 0, 1, 6, 0, 4, 3, 0,
                0, 0, 6, 4, 0, 0, 0, 0,
            ],
        ),
    ];
    for (data, nft_bytes) in cases {
        let set = endpoint_map(data.clone());
        assert_eq!(typeof_udata(&set), nft_bytes, "data {data:?}");
    }
}
