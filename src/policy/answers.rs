//! Answers checked against the questions: the minting round records, per asked key, what
//! it asked (method, elicitation mode, requested schema); the retry's `inputResponses`
//! must answer exactly that.
//!
//! Invariant: an answer reaches the upstream only when it is the result type of its
//! question (`ElicitResult`, `CreateMessageResult`, `ListRootsResult`) and, for an
//! accepted form elicitation, its content validates against the requested schema as MCP
//! defines it: a flat object of primitive properties (`string` with
//! `minLength`/`maxLength`/`format`, `enum` and titled `oneOf`, `number`/`integer` with
//! `minimum`/`maximum`, `boolean`, multi-select arrays), `required` honoured, no other
//! properties. An answer object carries only the members its result type defines (with
//! the `_meta` every result may carry), each read without a look-alike sibling
//! ([`jsonrpc::member`]): `{"action":"decline","ACTION":"accept"}` is refused, not read
//! as a decline while a case-folding upstream reads an accept; so is an unknown member
//! (`admin`), a look-alike of a content block's `type` or of a root's `uri`, and accepted
//! form content with two fields whose names fold together. A refusal names the question
//! key and the rule, never echoes the answer.

use super::questions::{Round, Schema};
use crate::jsonrpc;
use crate::jsonrpc::JsonView;
use crate::text::printable;
use crate::token::canonical;
#[cfg(any(test, feature = "oracle"))]
use serde_json::Value;

/// The most bytes the recorded questions of one round may take in a token.
pub const MAX_QUESTIONS_BYTES: usize = 16 * 1024;

/// The recorded questions cannot travel in a token: too large, or holding a number the
/// token's encoding cannot carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestionsTooLarge;

/// What a round asked, per key, as sealed into its token (`qd` claim): the keys asked,
/// and the claim's text, `{key: {"m": method, "k": mode, "s": schema}}` as the token's
/// encoding writes it ([`canonical::write_python_json`], keys in the round's order),
/// written straight from the round without building its tree. Refused when serde_json's
/// compact form of that object would take more than [`MAX_QUESTIONS_BYTES`], or when a
/// schema holds a number the encoding cannot carry.
pub fn record(round: Round<'_>) -> Result<(Vec<String>, String), QuestionsTooLarge> {
    // Sized from what is written: each schema's text and a little per question.
    let schemas: usize = (round.questions.iter())
        .filter_map(|q| q.schema.as_ref().map(Schema::text_len_hint))
        .sum();
    let mut claim = QuestionsText {
        text: String::with_capacity(schemas + 64 * round.asked.len() + 2),
        len: 0,
    };
    claim.raw("{");
    for (i, (key, question)) in round.asked.iter().zip(round.questions).enumerate() {
        if i > 0 {
            claim.raw(",");
        }
        claim.string(key);
        claim.raw(":{\"m\":");
        claim.string(&question.method);
        match &*question.method {
            "elicitation/create" => {
                claim.raw(",\"k\":");
                claim.string(question.mode.as_deref().unwrap_or("form"));
                if let Some(schema) = &question.schema {
                    claim.raw(",\"s\":");
                    claim.len += write_schema(schema, &mut claim.text)?;
                }
            }
            "sampling/createMessage" if question.wants_tools => claim.raw(",\"t\":true"),
            _ => {}
        }
        claim.raw("}");
    }
    claim.raw("}");
    if claim.len > MAX_QUESTIONS_BYTES {
        return Err(QuestionsTooLarge);
    }
    Ok((round.asked, claim.text))
}

/// The `qd` claim being written, and serde_json's compact length of the same object
/// (what the limit counts): the structure's ASCII is the same in both, strings and
/// numbers differ (Python escapes non-ASCII, serde_json writes it as it is).
struct QuestionsText {
    text: String,
    len: usize,
}

impl QuestionsText {
    /// Structure: `{`, `:`, a fixed key, the same bytes in both forms.
    fn raw(&mut self, ascii: &str) {
        self.text.push_str(ascii);
        self.len += ascii.len();
    }

    fn string(&mut self, s: &str) {
        let before = self.text.len();
        canonical::write_string(s, &mut self.text);
        let written = self.text.len() - before;
        // Every escape Python writes is longer than the bytes it stands for, so a string
        // written at its own length plus quotes has none: printable ASCII, which
        // serde_json writes the same. Anything else is counted the serde_json way.
        self.len += match written == s.len() + 2 {
            true => written,
            false => canonical::serde_string_len(s),
        };
    }
}

/// A schema's canonical text appended to `out`; its serde_json compact length.
fn write_schema(schema: &Schema<'_>, out: &mut String) -> Result<usize, QuestionsTooLarge> {
    match schema {
        // Already in the encoding's spelling (compact, strings and integers as Python
        // writes them, as most servers send a schema): copied as it stands, and
        // serde_json's compact form of it is the same text.
        Schema::Text(text) if canonical::python_spelled(text, false) => {
            out.push_str(text);
            Ok(text.len())
        }
        // A schema number beyond f64 (`1e400`) would travel as `Infinity`, which no
        // JSON parser reads back: the token would never open (found by the `answers`
        // fuzz target); an integer longer than Python reads made minting panic.
        Schema::Text(text) => {
            canonical::transcode_python_json(text, out).map_err(|_| QuestionsTooLarge)
        }
        #[cfg(any(test, feature = "oracle"))]
        Schema::Tree(value) => {
            if !canonical::reads_back(value) {
                return Err(QuestionsTooLarge);
            }
            canonical::write_python_json(*value, false, out).map_err(|_| QuestionsTooLarge)?;
            Ok(serialized_len(value))
        }
    }
}

/// The length of `value` as compact JSON, counted without keeping the text.
#[cfg(any(test, feature = "oracle"))]
fn serialized_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("a value serialises to a counter");
    count.0
}

/// An answer that does not answer its question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadAnswer {
    /// The question key, printable.
    pub key: String,
    /// The rule it broke, in words that name no client value.
    pub rule: String,
}

/// Check every answer to a key the round asked (`asked`) against the question recorded
/// for it; the others are not looked at (the caller drops them). Both are objects, read
/// as [`JsonView`]s: over their text ([`jsonrpc::LiteJson`]) or as trees, by one set of
/// rules.
pub fn check<Q: JsonView, A: JsonView>(
    questions: &Q,
    responses: &A,
    asked: impl Fn(&str) -> bool,
) -> Result<(), BadAnswer> {
    for (key, answer) in responses.entries().into_iter().flatten() {
        let Some(question) = questions.get(key).filter(|_| asked(key)) else {
            continue;
        };
        check_one(question, answer).map_err(|rule| BadAnswer {
            key: printable(key, 64),
            rule,
        })?;
    }
    Ok(())
}

fn check_one<Q: JsonView, A: JsonView>(question: &Q, answer: &A) -> Result<(), String> {
    if !answer.is_object() {
        return Err("must be a result object".to_owned());
    }
    match question.get("m").and_then(Q::as_str).unwrap_or("") {
        "elicitation/create" => check_elicit(question, answer),
        "sampling/createMessage" => check_sampling(question, answer),
        "roots/list" => check_roots(answer),
        _ => Err("answers a question of an unknown kind".to_owned()),
    }
}

/// An answer's result type: what a refusal calls it, and the members it defines (MCP
/// schema, as the pinned SDK's `mcp_types` declares them: `ElicitResult`,
/// `CreateMessageResult` and the SDK's `CreateMessageResultWithTools`, `ListRootsResult`
/// and its `Root`; `_meta` wherever a result or a root may carry it; none of them has a
/// `resultType`).
struct Shape {
    what: &'static str,
    members: &'static [&'static str],
}

const ELICIT_RESULT: Shape = Shape {
    what: "an elicitation result",
    members: &["action", "content", "_meta"],
};
const SAMPLING_RESULT: Shape = Shape {
    what: "a sampling result",
    members: &["role", "content", "model", "stopReason", "_meta"],
};
const ROOTS_RESULT: Shape = Shape {
    what: "a roots result",
    members: &["roots", "_meta"],
};
const ROOT: Shape = Shape {
    what: "a roots result of Root objects",
    members: &["uri", "name", "_meta"],
};

impl Shape {
    /// Refuse a member the type does not define: a look-alike of one it does (`ACTION`,
    /// `Content`, `stop_reason`) is named as such, anything else (`admin`) as unknown.
    /// Every key is compared, so no lenient upstream reads a member that was not checked.
    fn only_defined<A: JsonView>(&self, object: &A) -> Result<(), String> {
        let Some(key) = (object.entries().into_iter().flatten())
            .map(|(key, _)| key)
            .find(|key| !self.members.contains(key))
        else {
            return Ok(());
        };
        Err(
            match self
                .members
                .iter()
                .find(|name| jsonrpc::folds_equal(name, key))
            {
                Some(name) => self.look_alike(name),
                None => format!(
                    "must be {} (no member but {})",
                    self.what,
                    self.members.join(", ")
                ),
            },
        )
    }

    /// The member `name` of `object`, read by the one rule ([`jsonrpc::member`]).
    fn get<'a, A: JsonView>(&self, object: &'a A, name: &str) -> Result<Option<&'a A>, String> {
        jsonrpc::member(object, name).map_err(|_| self.look_alike(name))
    }

    fn look_alike(&self, name: &str) -> String {
        format!(
            "must be {} (another key reads like its member \"{name}\")",
            self.what
        )
    }
}

fn check_elicit<Q: JsonView, A: JsonView>(question: &Q, answer: &A) -> Result<(), String> {
    const NOT_ELICIT: &str = "must be an elicitation result (action accept, decline or cancel)";
    ELICIT_RESULT.only_defined(answer)?;
    let action = ELICIT_RESULT.get(answer, "action")?.and_then(A::as_str);
    let content = ELICIT_RESULT
        .get(answer, "content")?
        .filter(|c| !c.is_null());
    match (action, content) {
        (Some("decline" | "cancel"), None) => Ok(()),
        (Some("decline" | "cancel"), Some(_)) => {
            Err("may carry content only when the action is accept".to_owned())
        }
        (Some("accept"), content) => {
            let url_mode = question.get("k").and_then(Q::as_str) == Some("url");
            match (url_mode, content) {
                (true, None) => Ok(()),
                (true, Some(_)) => Err("a URL elicitation is accepted without content".to_owned()),
                (false, None) => Err("an accepted form elicitation must carry content".to_owned()),
                (false, Some(content)) => match question.get("s") {
                    Some(schema) => check_form(schema, content),
                    None => Err("answers a form without a requested schema".to_owned()),
                },
            }
        }
        _ => Err(NOT_ELICIT.to_owned()),
    }
}

fn check_sampling<Q: JsonView, A: JsonView>(question: &Q, answer: &A) -> Result<(), String> {
    let shape = &SAMPLING_RESULT;
    shape.only_defined(answer)?;
    if !matches!(
        shape.get(answer, "role")?.and_then(A::as_str),
        Some("user" | "assistant")
    ) {
        return Err("must be a sampling result (role user or assistant)".to_owned());
    }
    if !shape.get(answer, "model")?.is_some_and(A::is_string) {
        return Err("must be a sampling result (model a string)".to_owned());
    }
    // A block is an object with a string `type`, read by the same rule: a `Type` beside
    // it could make a folding upstream read another kind of block.
    let is_block = |v: &A| {
        if !v.is_object() {
            return Ok(false);
        }
        jsonrpc::member(v, "type")
            .map(|t| t.is_some_and(A::is_string))
            .map_err(|_| {
                "must be a sampling result (another key of a content block reads like \"type\")"
                    .to_owned()
            })
    };
    let tools = question.get("t").and_then(Q::as_bool) == Some(true);
    let content = shape.get(answer, "content")?;
    let valid = match content.map(|c| (c, c.as_array())) {
        Some((_, Some(blocks))) if tools => {
            let mut all = true;
            for block in blocks {
                all &= is_block(block)?;
            }
            all
        }
        Some((block, _)) => is_block(block)?,
        None => false,
    };
    if valid {
        Ok(())
    } else {
        Err("must be a sampling result (content a content block)".to_owned())
    }
}

fn check_roots<A: JsonView>(answer: &A) -> Result<(), String> {
    const NOT_ROOTS: &str = "must be a roots result (each root a file:// uri)";
    ROOTS_RESULT.only_defined(answer)?;
    let roots = ROOTS_RESULT
        .get(answer, "roots")?
        .and_then(A::as_array)
        .ok_or_else(|| "must be a roots result (roots an array)".to_owned())?;
    for root in roots {
        if !root.is_object() {
            return Err(NOT_ROOTS.to_owned());
        }
        ROOT.only_defined(root)?;
        let uri_ok = ROOT
            .get(root, "uri")?
            .and_then(A::as_str)
            .is_some_and(|uri| uri.starts_with("file://"));
        let name_ok = ROOT
            .get(root, "name")?
            .is_none_or(|n| n.is_string() || n.is_null());
        if !(uri_ok && name_ok) {
            return Err(NOT_ROOTS.to_owned());
        }
    }
    Ok(())
}

/// Accepted form content against the requested schema, as MCP restricts it.
fn check_form<Q: JsonView, A: JsonView>(schema: &Q, content: &A) -> Result<(), String> {
    if !content.is_object() {
        return Err("content must be an object".to_owned());
    }
    // Every field is read, each by the one rule: none may fold to another.
    jsonrpc::distinct(content)
        .map_err(|_| "content has two fields whose names read alike".to_owned())?;
    let properties = schema.get("properties").filter(|p| p.is_object());
    if let Some(required) = schema.get("required").and_then(Q::as_array) {
        for name in required.iter().filter_map(Q::as_str) {
            if content.get(name).is_none() {
                return Err(format!("content lacks the required field {}", field(name)));
            }
        }
    }
    for (name, value) in content.entries().into_iter().flatten() {
        let property = properties.and_then(|p| p.get(name)).ok_or_else(|| {
            format!(
                "content has a field the schema does not ask for ({})",
                field(name)
            )
        })?;
        check_property(property, value)
            .map_err(|rule| format!("content field {} {rule}", field(name)))?;
    }
    Ok(())
}

/// A field name as it may appear in an error (printable, bounded).
fn field(name: &str) -> String {
    format!("\"{}\"", printable(name, 64))
}

fn check_property<Q: JsonView, A: JsonView>(schema: &Q, value: &A) -> Result<(), String> {
    match schema.get("type").and_then(Q::as_str) {
        Some("string") => check_string(schema, value),
        Some("number") => check_number(schema, value, false),
        Some("integer") => check_number(schema, value, true),
        Some("boolean") => value
            .is_boolean()
            .then_some(())
            .ok_or_else(|| "must be a boolean".to_owned()),
        Some("array") => check_multi_select(schema, value),
        _ => Err("has a type MCP forms do not define".to_owned()),
    }
}

/// Whether `text` is among the allowed values of an `enum` or titled `oneOf` / `anyOf`
/// (`[{const, title}]`); `None` when the schema lists none. (Only a string value can
/// equal a string.)
fn listed<Q: JsonView>(schema: &Q, text: &str) -> Option<bool> {
    let is = |v: &Q| v.as_str() == Some(text);
    if let Some(values) = schema.get("enum").and_then(Q::as_array) {
        return Some(values.iter().any(is));
    }
    ["oneOf", "anyOf"].iter().find_map(|key| {
        schema.get(key).and_then(Q::as_array).map(|options| {
            options
                .iter()
                .filter_map(|option| option.get("const"))
                .any(is)
        })
    })
}

fn check_string<Q: JsonView, A: JsonView>(schema: &Q, value: &A) -> Result<(), String> {
    let text = value
        .as_str()
        .ok_or_else(|| "must be a string".to_owned())?;
    if listed(schema, text) == Some(false) {
        return Err("must be one of the values the schema lists".to_owned());
    }
    let length = text.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Q::as_u64)
        && length < min
    {
        return Err(format!("is shorter than minLength {min}"));
    }
    if let Some(max) = schema.get("maxLength").and_then(Q::as_u64)
        && length > max
    {
        return Err(format!("is longer than maxLength {max}"));
    }
    match schema.get("format").and_then(Q::as_str) {
        Some("email") if !is_email(text) => Err("is not an email address".to_owned()),
        Some("uri") if !is_uri(text) => Err("is not a URI".to_owned()),
        Some("date") if !is_date(text) => Err("is not a date (YYYY-MM-DD)".to_owned()),
        Some("date-time") if !is_date_time(text) => Err("is not a date-time (RFC 3339)".to_owned()),
        _ => Ok(()),
    }
}

fn check_number<Q: JsonView, A: JsonView>(
    schema: &Q,
    value: &A,
    integer: bool,
) -> Result<(), String> {
    let number = value
        .as_f64()
        .filter(|_| value.is_number())
        .ok_or_else(|| "must be a number".to_owned())?;
    if integer && number.fract() != 0.0 {
        return Err("must be an integer".to_owned());
    }
    if let Some(min) = schema.get("minimum").and_then(Q::as_f64)
        && number < min
    {
        return Err(format!("is below minimum {min}"));
    }
    if let Some(max) = schema.get("maximum").and_then(Q::as_f64)
        && number > max
    {
        return Err(format!("is above maximum {max}"));
    }
    Ok(())
}

fn check_multi_select<Q: JsonView, A: JsonView>(schema: &Q, value: &A) -> Result<(), String> {
    let items = value
        .as_array()
        .ok_or_else(|| "must be an array of choices".to_owned())?;
    let items_schema = schema.get("items");
    let lists = |text: &str| items_schema.and_then(|s| listed(s, text));
    // A schema without choices refuses whatever is chosen, even nothing.
    if items_schema.and_then(|s| listed(s, "")).is_none() {
        return Err("is a multi-select without choices".to_owned());
    }
    if !items
        .iter()
        .all(|item| item.as_str().is_some_and(|text| lists(text) == Some(true)))
    {
        return Err("must hold only values the schema lists".to_owned());
    }
    let count = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Q::as_u64)
        && count < min
    {
        return Err(format!("has fewer than minItems {min}"));
    }
    if let Some(max) = schema.get("maxItems").and_then(Q::as_u64)
        && count > max
    {
        return Err(format!("has more than maxItems {max}"));
    }
    Ok(())
}

/// `local@domain.tld`, no spaces: what form validators accept, not RFC 5322's corners.
fn is_email(text: &str) -> bool {
    let Some((local, domain)) = text.rsplit_once('@') else {
        return false;
    };
    !local.is_empty()
        && !text.chars().any(char::is_whitespace)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
}

/// An absolute URI: a scheme (RFC 3986 `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`), a
/// colon, and no whitespace.
fn is_uri(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !text.chars().any(char::is_whitespace)
}

/// `YYYY-MM-DD`, a real calendar day.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    text.bytes()
        .enumerate()
        .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit())
        && (1..=days).contains(&day)
}

/// RFC 3339 `date "T" time`, `time = HH:MM:SS[.frac](Z|±HH:MM)`.
fn is_date_time(text: &str) -> bool {
    let Some((date, time)) = text.split_once(['T', 't']) else {
        return false;
    };
    if !is_date(date) || time.len() < 9 {
        return false;
    }
    let two = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    let (clock, zone) = match time.find(['Z', 'z', '+', '-']) {
        Some(at) => time.split_at(at),
        None => return false,
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, fraction)| {
        if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            ""
        } else {
            whole
        }
    });
    let hms: Vec<&str> = clock.split(':').collect();
    let clock_ok = hms.len() == 3
        && hms.iter().all(|p| two(p))
        && hms[0] < "24"
        && hms[1] < "60"
        && hms[2] <= "60";
    let zone_ok = matches!(zone, "Z" | "z")
        || (zone.len() == 6 && two(&zone[1..3]) && &zone[3..4] == ":" && two(&zone[4..6]));
    clock_ok && zone_ok
}

#[cfg(test)]
mod tests;
