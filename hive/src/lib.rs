pub mod cli;
pub mod jobs;
