#[global_allocator]
static ALLOCATOR: swarm_controller::alloc::Allocator = swarm_controller::alloc::Allocator;

fn main() {
    std::process::exit(swarm_controller::cli::main());
}
