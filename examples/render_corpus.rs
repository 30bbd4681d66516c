//! Prints every corpus table as `nft -f` text (what operators would read), or the one named.

fn main() {
    let wanted = std::env::args().nth(1);
    for (name, table) in kubenft_nft_testkit::corpus::corpus() {
        if wanted.as_deref().is_none_or(|w| w == name) {
            println!("# corpus: {name}");
            print!("{}", kubenft::nft::render::render_table(&table));
        }
    }
}
