//! Any text in a manifests directory: parsing skips what it cannot read, the model rejects
//! what it cannot proxy, and what is left plans into a transaction that the fake kernel
//! accepts and the netlink encoder can encode. Nothing panics.
#![no_main]

use std::path::Path;

use kubenft::cluster::ClusterState;
use kubenft::nft::fake::FakeKernel;
use kubenft::proxier::{ProxyConfig, build};
use kubenft::source::manifests::{Manifests, parse_file};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut manifests = Manifests::default();
    let mut warnings = Vec::new();
    parse_file(Path::new("fuzz.yaml"), &text, &mut manifests, &mut warnings);
    let (state, _rejected) = ClusterState::from_objects(
        &manifests.services,
        &manifests.endpoint_slices,
        manifests.nodes.first(),
    );
    let config = ProxyConfig {
        hostname: "node-a".into(),
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        ..ProxyConfig::default()
    };
    let tables = build(&state, &config);
    let tx = kubenft::sync::reconcile_transaction(&[], &tables, None);
    FakeKernel::new()
        .apply(&tx)
        .expect("the fake kernel accepts every plan");
    kubenft::nft::kernel::apply::encode_only(&tx).expect("every plan encodes");
    for t in &tables {
        let _ = kubenft::nft::render::render_table(t);
    }
});
