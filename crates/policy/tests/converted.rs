//! The shipped manifest (`data/manifests/injecagent.toolkit.json`, `knox-toolkit/1`),
//! which Knox's suites run from, decides like the legacy manifest it replaced
//! (InjecAgent's `tools.json` with the needs file frozen at a644880): same tools, needs,
//! effects and annotations, and the compiled input schemas accept and refuse the same
//! parameters. It was written by `knox toolkit convert` from that legacy manifest.

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use knox_policy::ToolkitManifest;
use knox_policy::schema::validate;
use knox_policy::toolkit::ToolkitDoc;
use serde_json::{Map, Value, json};

const SHIPPED: &str = include_str!("../../../data/manifests/injecagent.toolkit.json");

/// Parameter sets probing a tool's schema: a valid one, each parameter wrong-typed,
/// null, an integer, a fraction, missing, and an extra parameter.
fn probes(t: &knox_policy::ToolEntry) -> Vec<Map<String, Value>> {
    let good = |ty: &str| match ty {
        "string" => json!("x"),
        "integer" => json!(3),
        "number" => json!(2.5),
        "boolean" => json!(true),
        "array" => json!(["a"]),
        _ => json!({"k": 1}),
    };
    let wrong = |ty: &str| if ty == "string" { json!(1) } else { json!("x") };
    let base: Map<String, Value> = t
        .spec
        .parameters
        .iter()
        .map(|p| (p.name.clone(), good(&p.ty)))
        .collect();
    let mut out = vec![base.clone()];
    for p in &t.spec.parameters {
        for v in [wrong(&p.ty), Value::Null, json!(7), json!(1.5)] {
            let mut m = base.clone();
            m.insert(p.name.clone(), v);
            out.push(m);
        }
        let mut m = base.clone();
        m.remove(&p.name);
        out.push(m);
    }
    let mut m = base;
    m.insert("not_a_parameter".into(), json!(1));
    out.push(m);
    out
}

#[test]
fn the_shipped_manifest_decides_as_the_legacy_one_it_replaced() {
    let legacy = knox_policy::shipped::legacy_a644880().unwrap();
    let converted = knox_policy::shipped::current().unwrap();
    assert_ne!(legacy.hash(), converted.hash());
    assert_eq!(converted.tools().count(), legacy.tools().count());
    let mut checked = 0;
    for a in legacy.tools() {
        let b = converted.tool(&a.name).unwrap();
        assert_eq!(a.toolkit, b.toolkit);
        assert_eq!(a.needs, b.needs, "{}", a.name);
        assert_eq!(a.needs_hash, b.needs_hash, "{}", a.name);
        assert_eq!(a.effect(), b.effect(), "{}", a.name);
        assert_eq!(a.returns_external(), b.returns_external());
        assert_eq!(a.annotations.sinks, b.annotations.sinks);
        assert_eq!(a.annotations.discloses, b.annotations.discloses);
        assert_eq!(a.annotations.returns, b.annotations.returns);
        assert_eq!(a.annotations.prose, b.annotations.prose);
        // What a model planner or executor is told about the tool, and the shape of a
        // simulated output, are the same too (InjecAgent's `exceptions`, which nothing
        // reads, are not carried).
        assert_eq!(a.spec.name, b.spec.name);
        assert_eq!(a.spec.summary, b.spec.summary, "{}", a.name);
        // As sets: the order of a schema's properties is the file's only where
        // serde_json keeps object order (the `knox` binaries, through Cedar's
        // `preserve_order`), not in this crate's own test build.
        // An absent `required` is `false`.
        let sorted = |f: &[knox_policy::spec::FieldSpec]| {
            let mut f = f.to_vec();
            f.sort_by(|x, y| x.name.cmp(&y.name));
            for x in &mut f {
                x.required = Some(x.required.unwrap_or(false));
            }
            f
        };
        assert_eq!(
            sorted(&a.spec.parameters),
            sorted(&b.spec.parameters),
            "{}",
            a.name
        );
        assert_eq!(
            sorted(&a.spec.returns),
            sorted(&b.spec.returns),
            "{}",
            a.name
        );
        for p in probes(a) {
            assert_eq!(
                validate(a, &p).is_ok(),
                validate(b, &p).is_ok(),
                "{} {p:?}",
                a.name
            );
            checked += 1;
        }
    }
    assert!(checked > 3000, "{checked}");
}

#[test]
fn the_shipped_manifest_is_the_conversion_of_the_frozen_one() {
    // Provenance of the shipped file: the conversion of the legacy manifest, unedited.
    // An edit to the shipped file (the place to change Knox's annotations now) ends
    // this; the test above then says what the edit changed.
    let legacy = knox_policy::shipped::legacy_a644880().unwrap();
    let converted = ToolkitManifest::from_doc(ToolkitDoc::from_legacy(&legacy)).unwrap();
    let shipped = ToolkitManifest::from_toolkit_text(SHIPPED).unwrap();
    assert_eq!(shipped.hash(), converted.hash());
    assert_eq!(
        shipped.hash(),
        knox_policy::shipped::current().unwrap().hash()
    );
}

#[test]
fn the_editor_schema_accepts_the_shipped_manifest_and_refuses_a_bad_one() {
    let schema: Value =
        serde_json::from_str(include_str!("../../../schemas/knox-toolkit-1.schema.json")).unwrap();
    jsonschema::meta::validate(&schema).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let shipped: Value = serde_json::from_str(SHIPPED).unwrap();
    assert!(v.is_valid(&shipped));
    let mut bad = shipped.clone();
    bad["servers"][0]["tools"][0]["name"] = json!("../escape");
    assert!(!v.is_valid(&bad));
    let mut bad = shipped;
    bad["servers"][0]["tools"][0]["effect"] = json!("peek");
    assert!(!v.is_valid(&bad));
}
