//! InjecAgent's manifest (its `tools.json` with Knox's needs file) written as a
//! `knox-toolkit/1` manifest decides like the legacy one: same tools, needs, effects
//! and annotations, and the compiled input schemas accept and refuse the same
//! parameters. The shipped file `data/manifests/injecagent.toolkit.json` is that
//! conversion of the shipped manifest.

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
fn the_converted_injecagent_manifest_decides_the_same() {
    let legacy = knox_policy::shipped::current().unwrap();
    let converted = ToolkitManifest::from_doc(ToolkitDoc::from_legacy(&legacy)).unwrap();
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
fn the_shipped_toolkit_file_is_that_conversion() {
    let legacy = knox_policy::shipped::current().unwrap();
    let converted = ToolkitManifest::from_doc(ToolkitDoc::from_legacy(&legacy)).unwrap();
    let shipped = ToolkitManifest::from_toolkit_text(SHIPPED).unwrap();
    assert_eq!(
        shipped.hash(),
        converted.hash(),
        "data/manifests/injecagent.toolkit.json is stale: regenerate it with \
         `knox toolkit convert -o data/manifests/injecagent.toolkit.json`"
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
