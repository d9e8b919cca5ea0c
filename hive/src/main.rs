fn main() {
    std::process::exit(hive::cli::main());
}
