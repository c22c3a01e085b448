//! What the server's benches share.

/// The five topology fixtures (215 nodes): one bundle of each topology.
pub(crate) const FIXTURES: [&[u8]; 5] = [
    include_bytes!("../../../verify/tests/fixtures/topologies/st-sa.json"),
    include_bytes!("../../../verify/tests/fixtures/topologies/mt-sa-seq-2.json"),
    include_bytes!("../../../verify/tests/fixtures/topologies/mt-sa-int-3.json"),
    include_bytes!("../../../verify/tests/fixtures/topologies/mt-ma-3-3.json"),
    include_bytes!("../../../verify/tests/fixtures/topologies/mt-ma-4-2.json"),
];
