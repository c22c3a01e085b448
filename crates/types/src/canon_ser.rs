//! A serde `Serializer` that writes RFC 8785 canonical JSON directly, without building a
//! `serde_json::Value` first: the same bytes as `canon::canonical(&serde_json::to_value(x)?)`
//! (members sorted by the UTF-16 code units of their names, the last of two equal names
//! kept, numbers and strings as [`crate::canon`] writes them, a non-finite float as
//! `null`), at a fraction of the allocations. Node bodies are measured through it.

use serde::Serialize;
use serde::ser::{self, Impossible};

use crate::canon;

/// Why a value cannot be written as canonical JSON.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SerError(String);

impl ser::Error for SerError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// Appends the canonical JSON of `value` to `out` (on error, `out` may hold a partial
/// write).
pub fn write<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), SerError> {
    value.serialize(Writer { out })
}

struct Writer<'o> {
    out: &'o mut Vec<u8>,
}

fn number(n: serde_json::Number, out: &mut Vec<u8>) {
    canon::write_value(&serde_json::Value::Number(n), out);
}

impl<'o> ser::Serializer for Writer<'o> {
    type Ok = ();
    type Error = SerError;
    type SerializeSeq = Seq<'o>;
    type SerializeTuple = Seq<'o>;
    type SerializeTupleStruct = Seq<'o>;
    type SerializeTupleVariant = Variant<Seq<'o>>;
    type SerializeMap = Object<'o>;
    type SerializeStruct = Object<'o>;
    type SerializeStructVariant = Variant<Object<'o>>;

    fn serialize_bool(self, v: bool) -> Result<(), SerError> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), SerError> {
        if v.unsigned_abs() <= (1u64 << 53) {
            self.out
                .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        } else {
            number(v.into(), self.out);
        }
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), SerError> {
        if v <= (1u64 << 53) {
            self.out
                .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        } else {
            number(v.into(), self.out);
        }
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), SerError> {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), SerError> {
        match serde_json::Number::from_f64(v) {
            Some(n) => number(n, self.out),
            // serde_json::to_value writes a non-finite float as null.
            None => self.out.extend_from_slice(b"null"),
        }
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), SerError> {
        canon::write_string(v.encode_utf8(&mut [0; 4]), self.out);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), SerError> {
        canon::write_string(v, self.out);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), SerError> {
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for b in v {
            ser::SerializeSeq::serialize_element(&mut seq, b)?;
        }
        ser::SerializeSeq::end(seq)
    }
    fn serialize_none(self) -> Result<(), SerError> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), SerError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), SerError> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), SerError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), SerError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        if name == RAW_VALUE_TOKEN {
            return Err(SerError(
                "raw JSON values are not written canonically".into(),
            ));
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        self.out.push(b'{');
        canon::write_string(variant, self.out);
        self.out.push(b':');
        value.serialize(Writer { out: self.out })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'o>, SerError> {
        self.out.push(b'[');
        Ok(Seq {
            out: self.out,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'o>, SerError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Seq<'o>, SerError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Variant<Seq<'o>>, SerError> {
        self.out.push(b'{');
        canon::write_string(variant, self.out);
        self.out.push(b':');
        Ok(Variant(self.serialize_seq(Some(len))?))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'o>, SerError> {
        if self.out.len() > MAX_BUFFER {
            return Err(SerError("value too large".into()));
        }
        self.out.push(b'{');
        let base = self.out.len();
        Ok(Object {
            out: self.out,
            base,
            members: Vec::new(),
            sorted: true,
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Object<'o>, SerError> {
        if name == RAW_VALUE_TOKEN {
            return Err(SerError(
                "raw JSON values are not written canonically".into(),
            ));
        }
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Variant<Object<'o>>, SerError> {
        self.out.push(b'{');
        canon::write_string(variant, self.out);
        self.out.push(b':');
        Ok(Variant(self.serialize_map(Some(len))?))
    }
}

/// serde_json's name for its raw values (never part of a payload).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Far beyond any node body; a guard against runaway output.
const MAX_BUFFER: usize = 1 << 30;

struct Seq<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Writer { out: self.out })
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = SerError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }
    fn end(self) -> Result<(), SerError> {
        self.out.push(b']');
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = SerError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }
    fn end(self) -> Result<(), SerError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = SerError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }
    fn end(self) -> Result<(), SerError> {
        ser::SerializeSeq::end(self)
    }
}

/// An externally tagged variant: `{"variant": …}`.
struct Variant<S>(S);

impl ser::SerializeTupleVariant for Variant<Seq<'_>> {
    type Ok = ();
    type Error = SerError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.0.element(value)
    }
    fn end(self) -> Result<(), SerError> {
        self.0.out.extend_from_slice(b"]}");
        Ok(())
    }
}

impl ser::SerializeStructVariant for Variant<Object<'_>> {
    type Ok = ();
    type Error = SerError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        self.0.member(key.into(), value)
    }
    fn end(mut self) -> Result<(), SerError> {
        finish_object(&mut self.0);
        self.0.out.push(b'}');
        Ok(())
    }
}

/// An object: members (`"name":value`) are written to the buffer as they come, comma
/// separated; when their names did not come in canonical order (or one repeats), they
/// are reordered once the object is complete.
struct Object<'o> {
    out: &'o mut Vec<u8>,
    /// Where the object's members start (after the `{`).
    base: usize,
    /// Each member's name and the range of `"name":value` in `out`.
    members: Vec<(std::borrow::Cow<'static, str>, usize, usize)>,
    /// Whether the names so far came strictly in canonical order.
    sorted: bool,
    /// A map key waiting for its value.
    key: Option<String>,
}

/// RFC 8785 member order: by UTF-16 code units (byte order for ASCII names).
fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

impl Object<'_> {
    fn member<T: Serialize + ?Sized>(
        &mut self,
        key: std::borrow::Cow<'static, str>,
        value: &T,
    ) -> Result<(), SerError> {
        if let Some((prev, _, _)) = self.members.last() {
            self.out.push(b',');
            self.sorted &= name_order(prev, &key).is_lt();
        }
        let start = self.out.len();
        canon::write_string(&key, self.out);
        self.out.push(b':');
        value.serialize(Writer { out: self.out })?;
        self.members.push((key, start, self.out.len()));
        Ok(())
    }
}

/// Closes the object of `o`, reordering its members first when they need it (shared by
/// maps, structs and struct variants).
fn finish_object(o: &mut Object<'_>) {
    if o.sorted {
        o.out.push(b'}');
        return;
    }
    let written = o.out.split_off(o.base);
    let members = &mut o.members;
    // Stable: of equal names, the last one written stays last.
    members.sort_by(|a, b| name_order(&a.0, &b.0));
    let mut first = true;
    let mut i = 0;
    while let Some((key, start, end)) = members.get(i) {
        i += 1;
        // Of equal names the last one written wins (a map's insert replaces).
        if members.get(i).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if !first {
            o.out.push(b',');
        }
        first = false;
        if let Some(m) = written.get(start - o.base..end - o.base) {
            o.out.extend_from_slice(m);
        }
    }
    o.out.push(b'}');
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = SerError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), SerError> {
        self.key = Some(key.serialize(KeyWriter)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| SerError("map value without a key".into()))?;
        self.member(key.into(), value)
    }
    fn end(mut self) -> Result<(), SerError> {
        finish_object(&mut self);
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = SerError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        self.member(key.into(), value)
    }
    fn end(mut self) -> Result<(), SerError> {
        finish_object(&mut self);
        Ok(())
    }
}

/// Map keys: strings, and the scalars serde_json turns into strings.
struct KeyWriter;

impl ser::Serializer for KeyWriter {
    type Ok = String;
    type Error = SerError;
    type SerializeSeq = Impossible<String, SerError>;
    type SerializeTuple = Impossible<String, SerError>;
    type SerializeTupleStruct = Impossible<String, SerError>;
    type SerializeTupleVariant = Impossible<String, SerError>;
    type SerializeMap = Impossible<String, SerError>;
    type SerializeStruct = Impossible<String, SerError>;
    type SerializeStructVariant = Impossible<String, SerError>;

    fn serialize_bool(self, v: bool) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String, SerError> {
        Err(SerError("a float is not a map key".into()))
    }
    fn serialize_f64(self, _v: f64) -> Result<String, SerError> {
        Err(SerError("a float is not a map key".into()))
    }
    fn serialize_char(self, v: char) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, SerError> {
        Ok(v.to_string())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, SerError> {
        Err(SerError("bytes are not a map key".into()))
    }
    fn serialize_none(self) -> Result<String, SerError> {
        Err(SerError("null is not a map key".into()))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _v: &T) -> Result<String, SerError> {
        Err(SerError("an option is not a map key".into()))
    }
    fn serialize_unit(self) -> Result<String, SerError> {
        Err(SerError("null is not a map key".into()))
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, SerError> {
        Err(SerError("null is not a map key".into()))
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, SerError> {
        Ok(variant.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, SerError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, SerError> {
        Err(SerError("a variant is not a map key".into()))
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, SerError> {
        Err(SerError("a sequence is not a map key".into()))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, SerError> {
        Err(SerError("a tuple is not a map key".into()))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, SerError> {
        Err(SerError("a tuple is not a map key".into()))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, SerError> {
        Err(SerError("a variant is not a map key".into()))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, SerError> {
        Err(SerError("a map is not a map key".into()))
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, SerError> {
        Err(SerError("a struct is not a map key".into()))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, SerError> {
        Err(SerError("a variant is not a map key".into()))
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use serde_json::{Value, json};

    fn same(v: &Value) {
        let mut direct = Vec::new();
        super::write(v, &mut direct).unwrap();
        assert_eq!(
            String::from_utf8(direct).unwrap(),
            String::from_utf8(crate::canon::canonical(v)).unwrap()
        );
    }

    #[test]
    fn writes_what_the_value_path_writes() {
        same(
            &json!({"b": [1, -2, 0, 1.5, 2000.0, -0.0, 1e21, 9007199254740993u64, -9007199254740993i64],
            "a": {"y": null, "x": 0.5, "": true}, "é": "\u{1}\"\\\n", "\u{20ac}": 1, "\r": 2,
            "\u{fb33}": 3, "\u{1f600}": 4, "\u{80}": 5, "z": [[], {}, [{"k": "v"}]]}),
        );
        let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]}"#;
        same(&serde_json::from_str(input).unwrap());
    }

    #[test]
    fn a_repeated_name_keeps_the_last_value_as_a_json_map_does() {
        struct Dup;
        impl serde::Serialize for Dup {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("b", &1)?;
                m.serialize_entry("a", &2)?;
                m.serialize_entry("b", &3)?;
                m.end()
            }
        }
        let mut direct = Vec::new();
        super::write(&Dup, &mut direct).unwrap();
        assert_eq!(String::from_utf8(direct).unwrap(), r#"{"a":2,"b":3}"#);
        let v = serde_json::to_value(Dup).unwrap();
        assert_eq!(crate::canon::canonical(&v), br#"{"a":2,"b":3}"#);
    }

    #[test]
    fn writes_typed_values_as_their_json_values() {
        #[derive(serde::Serialize)]
        #[serde(tag = "t", rename_all = "snake_case")]
        enum E {
            Unit,
            Struct { z: u8, a: Option<String> },
        }
        #[derive(serde::Serialize)]
        enum X {
            New(u32),
            Tuple(u8, i8),
            Named { b: f64 },
            Plain,
        }
        #[derive(serde::Serialize)]
        struct S {
            zeta: Vec<E>,
            alpha: (u8, char),
            #[serde(skip_serializing_if = "Option::is_none")]
            skipped: Option<u8>,
            x: Vec<X>,
            map: std::collections::HashMap<u32, f32>,
            nan: f64,
        }
        let s = S {
            zeta: vec![E::Unit, E::Struct { z: 1, a: None }],
            alpha: (7, 'q'),
            skipped: None,
            x: vec![X::New(1), X::Tuple(2, -3), X::Named { b: 0.25 }, X::Plain],
            map: [(10, 1.5), (2, 0.0)].into_iter().collect(),
            nan: f64::NAN,
        };
        let mut direct = Vec::new();
        super::write(&s, &mut direct).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            String::from_utf8(direct).unwrap(),
            String::from_utf8(crate::canon::canonical(&v)).unwrap()
        );
    }
}
