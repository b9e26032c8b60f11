//! Filters over metadata, and filtered search: the queries beside [`crate::graph`].
//!
//! One filter language for Rust, Python, C and the CLI: JSON objects in the style of Chroma,
//! Pinecone and Qdrant clients ([`Filter::parse`]), or the typed builder ([`Filter::eq`] and
//! friends). Its meaning, on one document ([`Filter::matches`]):
//!
//! * `{"field": v}` is `{"field": {"$eq": v}}`; several fields or operators in one object
//!   must all hold (`$and`).
//! * `$eq`, `$in`, `$contains`: the field's value equals the operand (one of the operands for
//!   `$in`), or the field is a list holding it. Numbers compare by value across integers and
//!   floats (3 equals 3.0); a bool never equals a number; `null` equals only `null`.
//! * `$gt`, `$gte`, `$lt`, `$lte`: numbers against numbers, strings against strings (by their
//!   UTF-8 bytes); a value of another type, or a missing field, does not pass; a list passes
//!   when any element does.
//! * `$ne` is `$not $eq` and `$nin` is `$not $in`: a missing field passes them.
//! * `$exists`: whether the field is present (with any value, null included).
//! * `$and` and `$or` take a non-empty list of filters; `$not` takes a filter, at the top or
//!   inside a field (`{"f": {"$not": {"$gt": 5}}}`). `{}` passes everything.
//!
//! A malformed filter (unknown operator, wrong operand type, an empty `$and`) is
//! [`Error::InvalidArgument`] naming what is wrong, before any search work.
//!
//! [`index`] answers which slots pass a filter from per-field postings and sorted values
//! (derived from the metadata, so it can always be rebuilt); [`search`] chooses, per query,
//! between an exact scan of the slots that pass and a graph search that routes through slots
//! that fail, and falls back to the scan when the graph search visits more than the scan
//! would cost.
//!
//! Invariants: evaluation through the index equals [`Filter::matches`] on every document
//! (tests/filter.rs checks every operator against brute force); a filtered search returns
//! only live slots that pass, and never fewer than min(k, live slots that pass).

pub mod index;
pub mod search;

use crate::error::{Error, Result};
use crate::format::metadata::{DocRef, ListRef, Value, ValueRef};

/// A scalar operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// null.
    Null,
    /// A bool.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A finite float.
    Float(f64),
    /// A string.
    Str(String),
}

impl From<bool> for Scalar {
    fn from(b: bool) -> Scalar {
        Scalar::Bool(b)
    }
}
impl From<i64> for Scalar {
    fn from(i: i64) -> Scalar {
        Scalar::Int(i)
    }
}
impl From<i32> for Scalar {
    fn from(i: i32) -> Scalar {
        Scalar::Int(i64::from(i))
    }
}
impl From<f64> for Scalar {
    fn from(f: f64) -> Scalar {
        Scalar::Float(f)
    }
}
impl From<&str> for Scalar {
    fn from(s: &str) -> Scalar {
        Scalar::Str(s.to_string())
    }
}
impl From<String> for Scalar {
    fn from(s: String) -> Scalar {
        Scalar::Str(s)
    }
}

/// A comparison of `$gt`, `$gte`, `$lt` or `$lte`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `>`
    Gt,
    /// `>=`
    Gte,
    /// `<`
    Lt,
    /// `<=`
    Lte,
}

impl Cmp {
    fn name(self) -> &'static str {
        match self {
            Cmp::Gt => "$gt",
            Cmp::Gte => "$gte",
            Cmp::Lt => "$lt",
            Cmp::Lte => "$lte",
        }
    }
    fn holds(self, o: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Cmp::Gt => o == Greater,
            Cmp::Gte => o != Less,
            Cmp::Lt => o == Less,
            Cmp::Lte => o != Greater,
        }
    }
}

/// What a filter asks of one field.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// `$eq` / `$contains`: equals the operand, or is a list holding it.
    Eq(Scalar),
    /// `$in`: equals one of the operands (or is a list holding one).
    In(Vec<Scalar>),
    /// A range comparison with a number or string.
    Range(Cmp, Scalar),
    /// `$exists`.
    Exists(bool),
}

/// A filter over metadata documents.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// Passes every document (`{}`).
    All,
    /// Every filter passes.
    And(Vec<Filter>),
    /// At least one passes.
    Or(Vec<Filter>),
    /// The filter does not pass.
    Not(Box<Filter>),
    /// A condition on one field.
    Field(String, Cond),
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument(format!("filter: {what}"))
}

fn check_number(key: &str, op: &str, s: &Scalar) -> Result<()> {
    match s {
        Scalar::Float(f) if !f.is_finite() => Err(invalid(format!(
            "{op} on {key:?}: {f} is not a finite number"
        ))),
        _ => Ok(()),
    }
}

impl Filter {
    /// Passes everything.
    pub fn all() -> Filter {
        Filter::All
    }
    /// `{key: {"$eq": v}}`.
    pub fn eq(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Field(key.into(), Cond::Eq(v.into()))
    }
    /// `{key: {"$ne": v}}` (a missing field passes).
    pub fn ne(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Not(Box::new(Filter::eq(key, v)))
    }
    /// `{key: {"$contains": v}}`: the list holds `v` (a scalar field: equals it).
    pub fn contains(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::eq(key, v)
    }
    /// `{key: {"$in": [...]}}`.
    pub fn is_in<T: Into<Scalar>>(
        key: impl Into<String>,
        vs: impl IntoIterator<Item = T>,
    ) -> Filter {
        Filter::Field(
            key.into(),
            Cond::In(vs.into_iter().map(Into::into).collect()),
        )
    }
    /// `{key: {"$nin": [...]}}` (a missing field passes).
    pub fn not_in<T: Into<Scalar>>(
        key: impl Into<String>,
        vs: impl IntoIterator<Item = T>,
    ) -> Filter {
        Filter::Not(Box::new(Filter::is_in(key, vs)))
    }
    /// `{key: {"$gt": v}}`.
    pub fn gt(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Field(key.into(), Cond::Range(Cmp::Gt, v.into()))
    }
    /// `{key: {"$gte": v}}`.
    pub fn gte(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Field(key.into(), Cond::Range(Cmp::Gte, v.into()))
    }
    /// `{key: {"$lt": v}}`.
    pub fn lt(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Field(key.into(), Cond::Range(Cmp::Lt, v.into()))
    }
    /// `{key: {"$lte": v}}`.
    pub fn lte(key: impl Into<String>, v: impl Into<Scalar>) -> Filter {
        Filter::Field(key.into(), Cond::Range(Cmp::Lte, v.into()))
    }
    /// `{key: {"$exists": present}}`.
    pub fn exists(key: impl Into<String>, present: bool) -> Filter {
        Filter::Field(key.into(), Cond::Exists(present))
    }
    /// Both this and `other`.
    pub fn and(self, other: Filter) -> Filter {
        match self {
            Filter::And(mut fs) => {
                fs.push(other);
                Filter::And(fs)
            }
            f => Filter::And(vec![f, other]),
        }
    }
    /// This or `other`.
    pub fn or(self, other: Filter) -> Filter {
        match self {
            Filter::Or(mut fs) => {
                fs.push(other);
                Filter::Or(fs)
            }
            f => Filter::Or(vec![f, other]),
        }
    }
    /// The negation (named so that `!` stays for bools).
    pub fn negate(self) -> Filter {
        Filter::Not(Box::new(self))
    }

    /// Parses a filter from JSON text.
    pub fn parse(text: &str) -> Result<Filter> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        Filter::from_json(&v)
    }

    /// A filter from a JSON value (an object).
    pub fn from_json(v: &serde_json::Value) -> Result<Filter> {
        let f = parse_object(v, "the filter")?;
        f.check()?;
        Ok(f)
    }

    /// Checks operands the builder can't (finite floats in ranges and equality).
    fn check(&self) -> Result<()> {
        match self {
            Filter::All => Ok(()),
            Filter::And(fs) | Filter::Or(fs) => {
                if fs.is_empty() {
                    return Err(invalid("$and / $or need at least one filter".into()));
                }
                fs.iter().try_for_each(Filter::check)
            }
            Filter::Not(f) => f.check(),
            Filter::Field(key, cond) => match cond {
                Cond::Eq(s) => check_number(key, "$eq", s),
                Cond::In(vs) => vs.iter().try_for_each(|s| check_number(key, "$in", s)),
                Cond::Range(op, s) => match s {
                    Scalar::Int(_) | Scalar::Str(_) => Ok(()),
                    Scalar::Float(_) => check_number(key, op.name(), s),
                    _ => Err(invalid(format!(
                        "{} on {key:?} takes a number or a string",
                        op.name()
                    ))),
                },
                Cond::Exists(_) => Ok(()),
            },
        }
    }

    /// Checks a filter built with the builder (the JSON parser checks as it goes).
    pub fn validate(&self) -> Result<()> {
        self.check()
    }

    /// The fields this filter looks at, each once, sorted.
    pub fn fields(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_fields(&mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    fn collect_fields<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Filter::All => {}
            Filter::And(fs) | Filter::Or(fs) => fs.iter().for_each(|f| f.collect_fields(out)),
            Filter::Not(f) => f.collect_fields(out),
            Filter::Field(k, _) => out.push(k),
        }
    }

    /// Whether `doc` passes (the meaning the module doc gives; the index computes the same).
    pub fn matches(&self, doc: &DocRef<'_>) -> bool {
        match self {
            Filter::All => true,
            Filter::And(fs) => fs.iter().all(|f| f.matches(doc)),
            Filter::Or(fs) => fs.iter().any(|f| f.matches(doc)),
            Filter::Not(f) => !f.matches(doc),
            Filter::Field(key, cond) => {
                let v = doc.get(key);
                match cond {
                    Cond::Exists(want) => v.is_some() == *want,
                    Cond::Eq(s) => v.is_some_and(|v| any_element(v, |e| equals(e, s))),
                    Cond::In(ss) => {
                        v.is_some_and(|v| any_element(v, |e| ss.iter().any(|s| equals(e, s))))
                    }
                    Cond::Range(op, s) => v.is_some_and(|v| {
                        any_element(v, |e| compare(e, s).is_some_and(|o| op.holds(o)))
                    }),
                }
            }
        }
    }

    /// Whether the owned document `doc` passes.
    pub fn matches_metadata(&self, doc: &crate::format::metadata::Metadata) -> bool {
        match crate::format::metadata::encode(doc) {
            Ok(bytes) => DocRef::new(&bytes, 0).is_ok_and(|d| self.matches(&d)),
            Err(_) => false,
        }
    }
}

fn any_element(v: ValueRef<'_>, mut f: impl FnMut(ValueRef<'_>) -> bool) -> bool {
    match v {
        ValueRef::List(l) => list_any(l, f),
        v => f(v),
    }
}

fn list_any(l: ListRef<'_>, f: impl FnMut(ValueRef<'_>) -> bool) -> bool {
    l.iter().any(f)
}

/// `a == b` between a stored scalar and an operand (numbers by value across types).
pub(crate) fn equals(a: ValueRef<'_>, b: &Scalar) -> bool {
    match (a, b) {
        (ValueRef::Null, Scalar::Null) => true,
        (ValueRef::Bool(x), Scalar::Bool(y)) => x == *y,
        (ValueRef::Str(x), Scalar::Str(y)) => x == y,
        (ValueRef::Int(_) | ValueRef::Float(_), Scalar::Int(_) | Scalar::Float(_)) => {
            compare(a, b) == Some(std::cmp::Ordering::Equal)
        }
        _ => false,
    }
}

/// How a stored scalar orders against a range operand: numbers with numbers (exactly, across
/// integers and floats), strings with strings; `None` across types.
pub(crate) fn compare(a: ValueRef<'_>, b: &Scalar) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (ValueRef::Int(x), Scalar::Int(y)) => Some(x.cmp(y)),
        (ValueRef::Float(x), Scalar::Float(y)) => x.partial_cmp(y),
        (ValueRef::Int(x), Scalar::Float(y)) => cmp_int_float(x, *y),
        (ValueRef::Float(x), Scalar::Int(y)) => cmp_int_float(*y, x).map(|o| o.reverse()),
        (ValueRef::Str(x), Scalar::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

/// Exact order of an i64 against a finite f64.
pub(crate) fn cmp_int_float(i: i64, f: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering::*;
    if f.is_nan() {
        return None;
    }
    // i64 spans [-2^63, 2^63): every f64 outside is beyond every i64.
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Greater);
    }
    let t = f.trunc();
    let ti = t as i64; // exact: |t| < 2^63 and t is integral
    match i.cmp(&ti) {
        Equal => {
            let frac = f - t;
            Some(if frac > 0.0 {
                Less
            } else if frac < 0.0 {
                Greater
            } else {
                Equal
            })
        }
        o => Some(o),
    }
}

fn scalar(key: &str, op: &str, v: &serde_json::Value) -> Result<Scalar> {
    Ok(match v {
        serde_json::Value::Null => Scalar::Null,
        serde_json::Value::Bool(b) => Scalar::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Scalar::Int(i)
            } else if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                Scalar::Float(f)
            } else {
                return Err(invalid(format!(
                    "{op} on {key:?}: {n} is not a usable number"
                )));
            }
        }
        serde_json::Value::String(s) => Scalar::Str(s.clone()),
        serde_json::Value::Array(_) => {
            return Err(invalid(format!(
                "{op} on {key:?} takes one value, not a list (use $in for any of several)"
            )))
        }
        serde_json::Value::Object(_) => {
            return Err(invalid(format!(
                "{op} on {key:?} takes a value, not an object"
            )))
        }
    })
}

fn filters(op: &str, v: &serde_json::Value) -> Result<Vec<Filter>> {
    let serde_json::Value::Array(items) = v else {
        return Err(invalid(format!("{op} takes a list of filters")));
    };
    if items.is_empty() {
        return Err(invalid(format!("{op} takes at least one filter")));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, f)| parse_object(f, &format!("{op}[{i}]")))
        .collect()
}

fn one(mut fs: Vec<Filter>) -> Filter {
    if fs.len() == 1 {
        fs.pop().unwrap_or(Filter::All)
    } else if fs.is_empty() {
        Filter::All
    } else {
        Filter::And(fs)
    }
}

fn parse_object(v: &serde_json::Value, what: &str) -> Result<Filter> {
    let serde_json::Value::Object(map) = v else {
        return Err(invalid(format!("{what} must be a JSON object")));
    };
    let mut all = Vec::with_capacity(map.len());
    for (k, v) in map {
        all.push(match k.as_str() {
            "$and" => Filter::And(filters("$and", v)?),
            "$or" => Filter::Or(filters("$or", v)?),
            "$not" => Filter::Not(Box::new(parse_object(v, "$not")?)),
            op if op.starts_with('$') => {
                return Err(invalid(format!(
                    "unknown operator {op} at the top of {what} (use $and, $or, $not, or a field)"
                )))
            }
            key => parse_field(key, v)?,
        });
    }
    Ok(one(all))
}

fn parse_field(key: &str, v: &serde_json::Value) -> Result<Filter> {
    let serde_json::Value::Object(ops) = v else {
        return Ok(Filter::Field(
            key.to_string(),
            Cond::Eq(scalar(key, "$eq", v)?),
        ));
    };
    if ops.is_empty() {
        return Err(invalid(format!("{key:?} has an empty object of operators")));
    }
    let mut all = Vec::with_capacity(ops.len());
    for (op, arg) in ops {
        let field = |c: Cond| Filter::Field(key.to_string(), c);
        all.push(match op.as_str() {
            "$eq" | "$contains" => field(Cond::Eq(scalar(key, op, arg)?)),
            "$ne" => Filter::Not(Box::new(field(Cond::Eq(scalar(key, op, arg)?)))),
            "$gt" | "$gte" | "$lt" | "$lte" => {
                let cmp = match op.as_str() {
                    "$gt" => Cmp::Gt,
                    "$gte" => Cmp::Gte,
                    "$lt" => Cmp::Lt,
                    _ => Cmp::Lte,
                };
                let s = scalar(key, op, arg)?;
                if !matches!(s, Scalar::Int(_) | Scalar::Float(_) | Scalar::Str(_)) {
                    return Err(invalid(format!(
                        "{op} on {key:?} takes a number or a string"
                    )));
                }
                field(Cond::Range(cmp, s))
            }
            "$in" | "$nin" => {
                let serde_json::Value::Array(items) = arg else {
                    return Err(invalid(format!("{op} on {key:?} takes a list of values")));
                };
                let vs = items
                    .iter()
                    .map(|x| scalar(key, op, x))
                    .collect::<Result<Vec<_>>>()?;
                if op == "$in" {
                    field(Cond::In(vs))
                } else {
                    Filter::Not(Box::new(field(Cond::In(vs))))
                }
            }
            "$exists" => match arg {
                serde_json::Value::Bool(b) => field(Cond::Exists(*b)),
                _ => return Err(invalid(format!("$exists on {key:?} takes true or false"))),
            },
            "$not" => Filter::Not(Box::new(parse_field(key, arg)?)),
            other => {
                return Err(invalid(format!(
                    "unknown operator {other} on {key:?} (use $eq, $ne, $gt, $gte, $lt, $lte, \
                     $in, $nin, $contains, $exists, $not)"
                )))
            }
        });
    }
    Ok(one(all))
}

/// A metadata value as a filter operand, where it is a scalar.
pub fn scalar_of(v: &Value) -> Option<Scalar> {
    Some(match v {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Int(i) => Scalar::Int(*i),
        Value::Float(f) => Scalar::Float(*f),
        Value::Str(s) => Scalar::Str(s.clone()),
        Value::List(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::metadata::{encode, parse_json};

    fn doc(json: &str) -> Vec<u8> {
        encode(&parse_json(json).unwrap()).unwrap()
    }

    fn passes(filter: &str, json: &str) -> bool {
        let b = doc(json);
        Filter::parse(filter)
            .unwrap()
            .matches(&DocRef::new(&b, 0).unwrap())
    }

    #[test]
    fn operators_mean_what_the_module_doc_says() {
        let d = r#"{"tenant": "acme", "year": 2024, "score": 0.5, "draft": false,
                    "tags": ["django", "web", 7], "none": null}"#;
        for (f, want) in [
            (r#"{}"#, true),
            (r#"{"tenant": "acme"}"#, true),
            (r#"{"tenant": "other"}"#, false),
            (r#"{"year": 2024.0}"#, true),
            (r#"{"year": {"$gt": 2023.5}}"#, true),
            (r#"{"year": {"$gte": 2024, "$lt": 2025}}"#, true),
            (r#"{"year": {"$lt": 2024}}"#, false),
            (r#"{"score": {"$lte": 0.5}}"#, true),
            (r#"{"tenant": {"$gt": "ab"}}"#, true),
            (r#"{"tenant": {"$gt": 5}}"#, false),
            (r#"{"year": {"$gt": "2000"}}"#, false),
            (r#"{"draft": false}"#, true),
            (r#"{"draft": 0}"#, false),
            (r#"{"tags": "django"}"#, true),
            (r#"{"tags": {"$contains": "web"}}"#, true),
            (r#"{"tags": {"$contains": 7.0}}"#, true),
            (r#"{"tags": {"$contains": "flask"}}"#, false),
            (r#"{"tags": {"$gt": 6}}"#, true),
            (r#"{"tags": {"$in": ["flask", "web"]}}"#, true),
            (r#"{"tags": {"$nin": ["flask", "web"]}}"#, false),
            (r#"{"missing": {"$ne": 1}}"#, true),
            (r#"{"missing": {"$nin": [1]}}"#, true),
            (r#"{"missing": 1}"#, false),
            (r#"{"missing": {"$exists": false}}"#, true),
            (r#"{"none": {"$exists": true}}"#, true),
            (r#"{"none": null}"#, true),
            (r#"{"tenant": null}"#, false),
            (r#"{"$or": [{"year": 1}, {"tenant": "acme"}]}"#, true),
            (r#"{"$and": [{"year": 2024}, {"tenant": "x"}]}"#, false),
            (r#"{"$not": {"tenant": "acme"}}"#, false),
            (r#"{"year": {"$not": {"$gt": 2030}}}"#, true),
            (r#"{"tenant": "acme", "year": 1}"#, false),
        ] {
            assert_eq!(passes(f, d), want, "{f}");
        }
    }

    #[test]
    fn malformed_filters_are_invalid_arguments_that_say_what() {
        for (f, needle) in [
            (r#"{"year": {"$foo": 1}}"#, "$foo"),
            (r#"{"$foo": 1}"#, "$foo"),
            (r#"{"year": {"$gt": true}}"#, "$gt"),
            (r#"{"year": {"$gt": null}}"#, "$gt"),
            (r#"{"year": {"$in": 3}}"#, "$in"),
            (r#"{"year": {"$exists": 1}}"#, "$exists"),
            (r#"{"$and": []}"#, "$and"),
            (r#"{"$or": {}}"#, "$or"),
            (r#"{"year": {"$eq": [1, 2]}}"#, "$in"),
            (r#"{"year": {}}"#, "empty"),
            (r#"[1]"#, "object"),
            (r#"{"year": "#, "JSON"),
            (r#"{"year": {"$eq": {"a": 1}}}"#, "object"),
            (r#"{"year": 1e999}"#, "JSON"),
        ] {
            match Filter::parse(f) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{f}: {m}"),
                other => panic!("{f}: {other:?}"),
            }
        }
        assert!(Filter::gt("x", true).validate().is_err());
        assert!(Filter::eq("x", f64::NAN).validate().is_err());
    }

    #[test]
    fn the_builder_equals_the_parser() {
        let built = Filter::eq("tenant", "acme")
            .and(Filter::gte("year", 2020).or(Filter::contains("tags", "web")))
            .and(Filter::ne("draft", true));
        let parsed = Filter::parse(
            r#"{"$and": [{"tenant": "acme"},
                         {"$or": [{"year": {"$gte": 2020}}, {"tags": {"$contains": "web"}}]},
                         {"draft": {"$ne": true}}]}"#,
        )
        .unwrap();
        assert_eq!(built, parsed);
        assert_eq!(built.fields(), vec!["draft", "tags", "tenant", "year"]);
    }

    #[test]
    fn ints_and_floats_compare_exactly() {
        use std::cmp::Ordering::*;
        assert_eq!(cmp_int_float(3, 3.0), Some(Equal));
        assert_eq!(cmp_int_float(3, 3.5), Some(Less));
        assert_eq!(cmp_int_float(-3, -3.5), Some(Greater));
        assert_eq!(cmp_int_float(i64::MAX, 9.3e18), Some(Less));
        assert_eq!(
            cmp_int_float(i64::MAX, 9_223_372_036_854_775_808.0),
            Some(Less)
        );
        assert_eq!(
            cmp_int_float(i64::MIN, -9_223_372_036_854_775_808.0),
            Some(Equal)
        );
        assert_eq!(
            cmp_int_float((1 << 53) + 1, (1u64 << 53) as f64),
            Some(Greater)
        );
    }
}
