//! Prints `kube_like(services, endpoints)` as `nft -f` text: `render_kube_like 1000 5`.

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let services = args.next().and_then(Result::ok).unwrap_or(100);
    let endpoints = args.next().and_then(Result::ok).unwrap_or(3);
    let table = kubenft_nft_testkit::corpus::kube_like(services, endpoints);
    print!("{}", kubenft::nft::render::render_table(&table));
}
