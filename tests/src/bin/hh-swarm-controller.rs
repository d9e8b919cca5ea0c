//! The `swarm-controller` binary, built inside the test crate (see
//! `hyperhive_tests::process`). Asked with `HYPERHIVE_TESTS_WHICH_TREE`, it
//! names the checkout it was built from, so that checkouts sharing one
//! target dir never run each other's builds.

/// As the `swarm-controller` binary's own `main.rs`.
#[global_allocator]
static ALLOCATOR: swarm_controller::alloc::Allocator = swarm_controller::alloc::Allocator;

fn main() {
    if std::env::var_os("HYPERHIVE_TESTS_WHICH_TREE").is_some() {
        println!("{}", env!("CARGO_MANIFEST_DIR"));
        return;
    }
    std::process::exit(swarm_controller::cli::main());
}
