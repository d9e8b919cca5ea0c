pub mod cli;
pub mod jobs;
pub mod runtime;
