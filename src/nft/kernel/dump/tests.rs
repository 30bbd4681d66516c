use super::*;

#[test]
fn comments_are_canonical_as_the_kernel_stores_them() {
    let mut t = Table {
        family: Family::Ip,
        name: "t".into(),
        comment: Some("say \"hi\"\n".into()),
        chains: Default::default(),
        sets: Default::default(),
    };
    t = canonical(&t);
    assert_eq!(t.comment.as_deref(), Some("say 'hi' "));
}
