//! Criterion benchmark of journaling: what a signed checkpoint costs next to the node
//! commits it authenticates, to choose the default interval (`Checkpoints::DEFAULT`).
//!
//! Each iteration commits 64 `tool_output` nodes (a 300-byte output each, the size of
//! an InjecAgent tool response) into a fresh journal, with checkpoints never, after
//! every node, or at the default interval. `cargo bench -p knox-monitor --bench journal`.

#![expect(clippy::unwrap_used, reason = "benchmarks")]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use knox_agent::{Plan, PlanError, PlanRequest, Planner, Prompt, Regulations};
use knox_attest::simulated::Simulated;
use knox_monitor::aeg::{AegBuilder, Checkpoints, NewNode};
use knox_monitor::run::{self, PlanSpec, Runtime};
use knox_policy::ToolkitManifest;
use knox_types::aeg::NodeKind;
use knox_types::apm::{StopPolicy, Topology, TopologyKind};
use knox_types::bundle::ModelInfo;
use knox_types::payload::{Body, ToolOutputPayload};
use serde_json::json;

const NODES: u64 = 64;

const TOOLS: &str = r#"[{"toolkit": "Mail", "name_for_model": "Mail", "name_for_human": "Mail",
  "description_for_model": "d", "description_for_human": "d", "tools": [{"name": "Read",
  "summary": "s", "parameters": [{"name": "id", "type": "string", "description": "d",
  "required": true}], "returns": [{"name": "email", "type": "object", "description": "d"}]}]}]"#;

const NEEDS: &str = r#"
version = 1
[runtime]
syscalls = ["read"]
paths = []
limits = { max_processes = 1, max_file_bytes = 1, max_memory_bytes = 1, cpu_seconds = 1, max_open_files = 1 }
[toolkits.Mail]
profile = "network-client"
syscalls = ["socket", "connect"]
endpoints = [{ host = "mail.example", port = 443 }]
cost = 1
"#;

/// Plans nothing: the bench needs only a journal header.
struct Empty;

impl Planner for Empty {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        let prompt = request.prompt;
        Ok(Plan {
            tasks: prompt.tasks.iter().map(|_| Vec::new()).collect(),
        })
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: "planner".into(),
            name: "empty".into(),
            weights_hash: None,
            declared: false,
        }
    }
}

fn output(i: u64) -> NewNode<'static> {
    NewNode {
        parent: Some(0),
        kind: NodeKind::ToolOutput,
        agent: "agent-0",
        payload: Body::ToolOutput(Box::new(ToolOutputPayload {
            output: json!({"email": {"id": i, "from": "someone@example.com",
                "subject": "Quarterly report", "body": "x".repeat(200)}}),
            cost: 1,
            confinement: None,
            settled: None,
        })),
        allowed: true,
        block_reason: None,
    }
}

fn journal(c: &mut Criterion) {
    let manifest = ToolkitManifest::from_sources(TOOLS, NEEDS).unwrap();
    let mut rt = Runtime::start(&Simulated, b"bench", manifest).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let regulations = Regulations::default();
    let stop = StopPolicy::default();
    let mut g = c.benchmark_group("journal");
    g.throughput(Throughput::Elements(NODES));
    let cases = [
        ("64 nodes, no checkpoint", u64::MAX),
        ("64 nodes, checkpoint every node", 1),
        (
            "64 nodes, default checkpoints",
            Checkpoints::DEFAULT.every_nodes,
        ),
    ];
    for (name, every_nodes) in cases {
        rt.checkpoints = Checkpoints {
            every_nodes,
            every_ms: u64::MAX,
        };
        let spec = PlanSpec {
            topology: Topology {
                kind: TopologyKind::StSa,
                tasks: 1,
                agents: 1,
            },
            planner: &Empty,
            regulations: &regulations,
            stop: &stop,
            models: vec![Empty.model()],
            journal_dir: Some(dir.path()),
            contract: None,
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || run::plan(&rt, &prompt, &spec, "bench").unwrap().1,
                |j| {
                    let mut aeg = AegBuilder::new(j);
                    for i in 0..NODES {
                        aeg.commit(output(i), None);
                    }
                    aeg
                },
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, journal);
criterion_main!(benches);
