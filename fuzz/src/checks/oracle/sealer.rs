//! The response sealer as it was before issue 22: the whole answer parsed into a tree,
//! checked, every `requestState` sealed in the tree, the tree written back. Minting is
//! the sidecar's own ([`StateSealer`]), with the fuzz ring: what the differential targets
//! compare is everything around it (which message is checked, refused, sealed, and what
//! the client reads), with each token opened back to what it seals.

use super::super::ring;
use mcp_state_guard::facade::jsonrpc::{self, ENVELOPE_FIELDS, ERROR_FIELDS};
use mcp_state_guard::facade::policy::answers;
use mcp_state_guard::facade::policy::capabilities::{self, Declared};
use mcp_state_guard::facade::policy::flow::FlowLimits;
use mcp_state_guard::facade::policy::questions::Round;
use mcp_state_guard::facade::token::{RequestBinding, SealOptions, StateSealer};
use serde_json::{Map, Value, json};

/// What the tree sealer decided: the label of the sealer's failure or MRTR refusal.
pub type Decision = Result<Option<Value>, &'static str>;

/// The tree sealer for one request.
pub struct TreeSealer<'a> {
    pub sealer: &'a StateSealer,
    pub binding: &'a RequestBinding,
    pub capabilities: Option<&'a Value>,
    pub limits: FlowLimits,
    pub max_state_bytes: usize,
    pub max_token_bytes: usize,
}

impl TreeSealer<'_> {
    /// A JSON text of an answer: `None` when nothing changed, else the sealed tree.
    pub fn seal_json(&self, body: &[u8]) -> Decision {
        let mut value = jsonrpc::parse_bounded(body, usize::MAX).map_err(|_| "unparseable_body")?;
        Ok(self.seal_value(&mut value)?.then_some(value))
    }

    fn seal_value(&self, value: &mut Value) -> Result<bool, &'static str> {
        match value {
            Value::Array(items) => {
                let mut changed = false;
                for item in items {
                    changed |= self.seal_value(item)?;
                }
                Ok(changed)
            }
            Value::Object(message) => {
                no_state_outside_result(message)?;
                match message.get_mut("result") {
                    Some(Value::Object(result)) => self.seal_result(result),
                    _ => Ok(false),
                }
            }
            _ => Ok(false),
        }
    }

    fn seal_result(&self, result: &mut Map<String, Value>) -> Result<bool, &'static str> {
        jsonrpc::check_result_fields(result).map_err(|_| "ambiguous_key")?;
        let asks = mcp_state_guard::facade::mcp::asks_for_input(result);
        let state = match result.get("requestState") {
            None | Some(Value::Null) if asks => None,
            None | Some(Value::Null) => return Ok(false),
            Some(Value::String(state)) => Some(state.as_str()),
            Some(_) => return Err("non_string_state"),
        };
        if state.is_some_and(|s| s.len() > self.max_state_bytes) {
            return Err("state_too_large");
        }
        let empty = Map::new();
        let requests = match result.get("inputRequests") {
            Some(Value::Object(requests)) => requests,
            _ => &empty,
        };
        let asked: Vec<String> = requests.keys().cloned().collect();
        if asked.iter().any(|key| !key.is_ascii()) {
            return Err("ambiguous_key");
        }
        let round = Round::of_tree(requests);
        if let Err(missing) =
            capabilities::check(self.capabilities.and_then(Declared::of), &round.questions)
        {
            return Err(if missing.unknown_methods.is_empty() {
                "missing_capability"
            } else {
                "unknown_input_method"
            });
        }
        let (_, questions) = answers::record(round).map_err(|_| "questions_too_large")?;
        let flow = self
            .limits
            .next(None, mcp_state_guard::facade::token::now())
            .map_err(|_| "round_limit")?;
        let options = SealOptions {
            principal: None,
            single_use: false,
            no_upstream_state: state.is_none(),
            asked: Some(&asked),
            questions: Some(questions.as_str()),
            flow: Some(flow),
        };
        let (token, _) =
            self.sealer
                .seal_counted(state.unwrap_or_default().into(), self.binding, &options);
        if token.len() > self.max_token_bytes {
            return Err("state_too_large");
        }
        result.insert("requestState".into(), Value::String(token));
        Ok(true)
    }
}

fn no_state_outside_result(message: &Map<String, Value>) -> Result<(), &'static str> {
    let ambiguous = |_| "ambiguous_key";
    jsonrpc::check_reserved(message, ENVELOPE_FIELDS).map_err(ambiguous)?;
    if let Some(Value::Object(params)) = message.get("params") {
        jsonrpc::check_result_fields(params).map_err(ambiguous)?;
        if params.get("requestState").is_some_and(|s| !s.is_null()) {
            return Err("no_request_context");
        }
    }
    if let Some(Value::Object(error)) = message.get("error") {
        jsonrpc::check_reserved(error, ERROR_FIELDS).map_err(ambiguous)?;
    }
    if let Some(Value::Object(data)) = message.get("error").and_then(|e| e.get("data")) {
        jsonrpc::check_result_fields(data).map_err(ambiguous)?;
        if data.get("requestState").is_some_and(|s| !s.is_null()) {
            return Err("no_request_context");
        }
    }
    Ok(())
}

/// `value` with every token at a message's `result.requestState` (batches and arrays in
/// them included) replaced by what it seals, opened for `binding` with the fuzz ring; a
/// state that does not open stays as it is (and so differs from any token's opening).
pub fn opened(mut value: Value, binding: &RequestBinding) -> Value {
    open_all(&mut value, binding);
    value
}

fn open_all(value: &mut Value, binding: &RequestBinding) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| open_all(item, binding)),
        Value::Object(message) => {
            let state = message
                .get_mut("result")
                .and_then(|r| r.get_mut("requestState"));
            if let Some(state) = state
                && let Some(token) = state.as_str()
                && let Ok(opened) = ring::sealer().open(token, binding, None)
            {
                *state = json!({
                    "sealed": opened.state(),
                    "ns": opened.no_upstream_state,
                    "q": opened.asked,
                    "qd": opened.questions.and_then(|q| q.tree()),
                });
            }
        }
        _ => {}
    }
}
