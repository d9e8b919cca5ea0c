pub mod cli;
pub mod nats_config;
