//! The members the index locates, by level: the envelope's, `params`' and `result`'s,
//! each spelled as the field lists of the tree path spell it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeField {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
}

impl EnvelopeField {
    pub const ALL: [EnvelopeField; 6] = [
        Self::Jsonrpc,
        Self::Id,
        Self::Method,
        Self::Params,
        Self::Result,
        Self::Error,
    ];

    /// The member's key.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jsonrpc => "jsonrpc",
            Self::Id => "id",
            Self::Method => "method",
            Self::Params => "params",
            Self::Result => "result",
            Self::Error => "error",
        }
    }
}

/// The `params` members [`Index::param`](super::Index::param) locates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamsField {
    Name,
    Uri,
    TaskId,
    Arguments,
    RequestState,
    InputResponses,
    Meta,
    IdempotencyKey,
}

impl ParamsField {
    pub const ALL: [ParamsField; 8] = [
        Self::Name,
        Self::Uri,
        Self::TaskId,
        Self::Arguments,
        Self::RequestState,
        Self::InputResponses,
        Self::Meta,
        Self::IdempotencyKey,
    ];

    /// The field of this key.
    pub(crate) fn named(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|field| field.name() == key)
    }

    /// The member a request's binding names its target by ([`crate::mcp::target_field`]).
    pub(crate) fn target(method: &str) -> Self {
        match crate::mcp::target_field(method) {
            "uri" => Self::Uri,
            _ => Self::Name,
        }
    }

    /// The member's key.
    pub fn name(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Uri => "uri",
            Self::TaskId => "taskId",
            Self::Arguments => "arguments",
            Self::RequestState => "requestState",
            Self::InputResponses => "inputResponses",
            Self::Meta => "_meta",
            Self::IdempotencyKey => "idempotencyKey",
        }
    }
}

/// The `result` members [`Index::result`](super::Index::result) locates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultField {
    ResultType,
    RequestState,
    InputRequests,
}

impl ResultField {
    pub const ALL: [ResultField; 3] = [Self::ResultType, Self::RequestState, Self::InputRequests];

    /// The member's key.
    pub fn name(self) -> &'static str {
        match self {
            Self::ResultType => "resultType",
            Self::RequestState => "requestState",
            Self::InputRequests => "inputRequests",
        }
    }
}
