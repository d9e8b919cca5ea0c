fn main() {
    std::process::exit(swarm_controller::cli::main());
}
