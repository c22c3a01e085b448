mod suites;
mod workloads;
