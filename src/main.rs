fn main() {
    println!("kubenft");
}
