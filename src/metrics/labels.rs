//! The closed label sets of the operational families ([`super::ops`]): method classes,
//! outcomes, upstream status classes, SSE event results, listeners.
//!
//! Invariant: each enum lists every value its label can take (`ALL`), so every series
//! can be created at zero before the first scrape, and nothing but these spellings ever
//! becomes a label value.

/// What kind of request: the three methods that carry states, other JSON-RPC, and the
/// routes with no JSON-RPC body (`method` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodClass {
    ToolsCall,
    PromptsGet,
    ResourcesRead,
    /// Any other JSON-RPC method, a client's response, or a POST refused before its
    /// method was known.
    Other,
    /// A GET: a 2025-era server-to-client event stream.
    GetStream,
    /// A DELETE: a 2025-era session end.
    Delete,
    /// A configured `passthrough_paths` request, or another body-less method.
    Passthrough,
}

impl MethodClass {
    pub const ALL: [MethodClass; 7] = [
        MethodClass::ToolsCall,
        MethodClass::PromptsGet,
        MethodClass::ResourcesRead,
        MethodClass::Other,
        MethodClass::GetStream,
        MethodClass::Delete,
        MethodClass::Passthrough,
    ];

    /// The class of a JSON-RPC method.
    pub fn of_method(method: &str) -> Self {
        match method {
            "tools/call" => MethodClass::ToolsCall,
            "prompts/get" => MethodClass::PromptsGet,
            "resources/read" => MethodClass::ResourcesRead,
            _ => MethodClass::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MethodClass::ToolsCall => "tools/call",
            MethodClass::PromptsGet => "prompts/get",
            MethodClass::ResourcesRead => "resources/read",
            MethodClass::Other => "other",
            MethodClass::GetStream => "get_stream",
            MethodClass::Delete => "delete",
            MethodClass::Passthrough => "passthrough",
        }
    }
}

/// How a request ended, as far as the response head (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream's answer (any status) reached the client.
    Ok,
    /// The sidecar refused the request (the client's fault, or a check it failed).
    Refused,
    /// The upstream was unreachable, too slow, or answered what cannot be made safe.
    UpstreamError,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Refused, Outcome::UpstreamError];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::UpstreamError => "upstream_error",
        }
    }
}

/// An upstream response status class (`class` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
}

impl StatusClass {
    pub const ALL: [StatusClass; 5] = [
        StatusClass::Informational,
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    pub fn of(status: http::StatusCode) -> Self {
        match status.as_u16() {
            ..200 => StatusClass::Informational,
            200..300 => StatusClass::Success,
            300..400 => StatusClass::Redirection,
            400..500 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

/// What became of one upstream SSE event (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseEvent {
    /// Carried a `requestState`, now sealed.
    Sealed,
    /// Passed byte for byte (notifications, results without state, comments).
    Passed,
    /// Replaced by an internal error that ends the stream (it could not be made safe).
    Withheld,
}

impl SseEvent {
    pub const ALL: [SseEvent; 3] = [SseEvent::Sealed, SseEvent::Passed, SseEvent::Withheld];

    pub fn as_str(self) -> &'static str {
        match self {
            SseEvent::Sealed => "sealed",
            SseEvent::Passed => "passed",
            SseEvent::Withheld => "withheld",
        }
    }
}

/// Which listener a connection came in on (`listener` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Proxy,
    Admin,
}

impl Listener {
    pub const ALL: [Listener; 2] = [Listener::Proxy, Listener::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Proxy => "proxy",
            Listener::Admin => "admin",
        }
    }
}
