//! The regulation guard's cost per disclosure: deriving φ from an action, its labels and
//! the run's directory, then deciding it under GDPR and HIPAA (two regulations × one
//! recipient: one Cedar request, evaluated against each regulation's scope policies and,
//! in scope, the slice of its norms that can match the flow). Target: ≤ 20 µs.

#![expect(clippy::unwrap_used, reason = "bench")]

use criterion::{Criterion, criterion_group, criterion_main};
use knox_regulation::{FlowExtra, Norms, Regulator, Seen};
use knox_types::Action;
use knox_types::apm::RegulationSpec;
use knox_types::regulation::{DirectoryEntry, RegulationContext, TaskContext};
use serde_json::json;

fn entry(address: &str, role: &str, country: &str) -> DirectoryEntry {
    DirectoryEntry {
        addresses: vec![address.into()],
        domains: vec![],
        role: role.into(),
        organisation: String::new(),
        jurisdiction: country.into(),
        baa: false,
        safeguards: false,
    }
}

fn bench(c: &mut Criterion) {
    let manifest = knox_policy::shipped::current().unwrap();
    let norms = Norms::embedded().unwrap();
    let spec = RegulationSpec {
        regulations: vec!["GDPR".into(), "HIPAA".into()],
        policy_hash: Some(norms.hash()),
        context: Some(RegulationContext {
            directory: vec![
                entry("records@clinic.example", "covered_entity", "us"),
                entry("offers@adreach.example", "marketing_vendor", "us"),
            ],
            consents: vec![],
            tasks: [(
                0,
                TaskContext {
                    sender: "records@clinic.example".into(),
                    purpose: "marketing".into(),
                },
            )]
            .into(),
            default_task: None,
            obligations: Default::default(),
        }),
    };
    let regulator = Regulator::new(&spec, Some(&norms)).unwrap();
    let read = manifest.tool("EpicFHIRGetPatientDetails").unwrap();
    let send = manifest.tool("GmailSendEmail").unwrap();
    let output =
        json!({"patient_data": {"name": "John Doe", "medications": {"heart": "BetaBlockers"}}});
    let seen = [Seen {
        node: 3,
        position: 0,
        labels: read.annotations.returns.as_ref(),
        output: &output,
        heard: false,
        carried: None,
    }];
    let action = Action::new(
        "GmailSendEmail",
        json!({"to": "offers@adreach.example", "subject": "s", "body": "John Doe takes BetaBlockers"}),
    )
    .unwrap();
    let mut g = c.benchmark_group("regulation");
    g.bench_function("derive", |b| {
        b.iter(|| regulator.flow(send, &action, None, Some(0), &seen));
    });
    let flow = regulator.flow(send, &action, None, Some(0), &seen).unwrap();
    let regs = spec.regulations.clone();
    g.bench_function("cedar (cold, GDPR+HIPAA)", |b| {
        b.iter(|| norms.decide(&regs, &flow, 0).unwrap());
    });
    // The same decision with every policy evaluated instead of the slice that can
    // match the flow (what `decide` did before slicing).
    let extra = FlowExtra::default();
    g.bench_function("cedar (cold, GDPR+HIPAA, whole set)", |b| {
        b.iter(|| norms.decide_whole_set(&regs, &flow, 0, &extra).unwrap());
    });
    g.bench_function("check (memoized facts)", |b| {
        b.iter(|| regulator.check(Some(flow.clone()), None));
    });
    g.bench_function("derive+check (memoized facts)", |b| {
        b.iter(|| {
            let f = regulator.flow(send, &action, None, Some(0), &seen);
            regulator.check(f, None)
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
