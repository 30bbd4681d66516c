//! Where the daemon's start goes outside the sync, in CPU time on one thread: decoding list
//! pages as the daemon's watchers do (straight into the store's kept form), keeping each object
//! in the store, completing the lists, and building the model at the first sync, for the
//! benchmark's synthetic cluster.
//!
//! `cargo run --release --example start_breakdown -- 30000x10`

#[path = "../benchmark/src/synthetic.rs"]
#[allow(dead_code)]
mod synthetic;

use std::time::Instant;

use kube::core::ObjectList;
use kube::runtime::watcher::Event;
use kubenft::cluster::LiveState;
use kubenft::node_inputs::load_inputs;
use kubenft::source::store::{ClusterStore, DecodedService, DecodedSlice};

/// Objects per list page, as the daemon asks.
const PAGE: usize = 1000;

fn pages<T: serde::Serialize>(kind: &str, objects: &[T]) -> Vec<Vec<u8>> {
    objects
        .chunks(PAGE)
        .map(|chunk| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": format!("{kind}List"),
                "metadata": {"resourceVersion": "1", "continue": "next"},
                "items": chunk,
            }))
            .unwrap()
        })
        .collect()
}

fn timed<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    println!("| {name} | {:.3} s |", start.elapsed().as_secs_f64());
    out
}

fn main() {
    let scale = std::env::args().nth(1).unwrap_or_else(|| "30000x10".into());
    let (services, endpoints) = synthetic::parse_scale(&scale).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("kubenft-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in synthetic::manifests(services, endpoints) {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let inputs = load_inputs(&dir, synthetic::NODE).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let service_pages = pages("Service", &inputs.services);
    let slice_pages = pages("EndpointSlice", &inputs.endpoint_slices);
    println!(
        "{services} × {endpoints}: {:.1} MiB of Services, {:.1} MiB of EndpointSlices\n",
        service_pages.iter().map(Vec::len).sum::<usize>() as f64 / 1048576.0,
        slice_pages.iter().map(Vec::len).sum::<usize>() as f64 / 1048576.0
    );
    println!("| step | wall time |\n|---|---|");
    let services: Vec<Vec<DecodedService>> = timed("Services decoded", || {
        service_pages
            .iter()
            .map(|p| {
                serde_json::from_slice::<ObjectList<DecodedService>>(p)
                    .unwrap()
                    .items
            })
            .collect()
    });
    let slices: Vec<Vec<DecodedSlice>> = timed("EndpointSlices decoded", || {
        slice_pages
            .iter()
            .map(|p| {
                serde_json::from_slice::<ObjectList<DecodedSlice>>(p)
                    .unwrap()
                    .items
            })
            .collect()
    });
    let mut store = ClusterStore::default();
    timed("Services kept", || {
        store.apply_decoded_service(Event::Init);
        for s in services.into_iter().flatten() {
            store.apply_decoded_service(Event::InitApply(s));
        }
    });
    timed("Services listed (InitDone)", || {
        store.apply_decoded_service(Event::InitDone)
    });
    timed("EndpointSlices kept", || {
        store.apply_decoded_slice(Event::Init);
        for s in slices.into_iter().flatten() {
            store.apply_decoded_slice(Event::InitApply(s));
        }
    });
    timed("EndpointSlices listed (InitDone)", || {
        store.apply_decoded_slice(Event::InitDone)
    });
    let mut live = LiveState::default();
    timed("model built", || {
        store.update_model(&mut live, synthetic::NODE)
    });
}
