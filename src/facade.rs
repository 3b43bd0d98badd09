//! What the crate shows outside itself, and to whom: the binary (`src/main.rs`), the
//! integration tests (`tests/`), the fuzz crate (`fuzz/`) and the benches (`benches/`).
//!
//! Every module of the crate is private and every item in it `pub(crate)` unless this
//! façade names it; `unreachable_pub` warns on a `pub` that nothing here reaches, so the
//! list below is the whole public surface, and rustc reports what nothing uses. Each
//! item keeps the path of the module that defines it (`facade::token::KeyRing` is
//! `crate::token::KeyRing`), so an item has one import path inside the crate and one
//! outside it.
//!
//! The tree implementations the fuzzers and differential tests compare the running code
//! with (the oracles: `jsonrpc::classify`, `RequestBinding::of`, `Round::of_tree`,
//! `Question::of_value`, `mcp::asks_for_input`) exist only with the `oracle` feature,
//! which the fuzz crate and the tests enable and the binary never does.

/// Wiring and start-up: the binary starts the sidecar here, the tests start it in
/// process.
pub mod app {
    pub use crate::app::ProcessMetrics;
    pub use crate::app::{Metrics, Running, StartError, start, start_from};

    /// The files a configuration names, checked before start-up.
    pub mod files {
        pub use crate::app::files::check_files;
    }
}

/// Who is calling.
pub mod auth {
    pub use crate::auth::{AuthMetrics, Verification};
    pub use crate::error::AuthFailure;

    /// JWT key sets.
    pub mod jwks {
        pub use crate::auth::jwks::JwksError;
    }

    /// JWT access tokens.
    pub mod jwt {
        pub use crate::auth::jwt::principal;
    }
}

/// Typed, validated settings.
pub mod config {
    pub use crate::config::{
        AdminConfig, IdempotencyConfig, JwtConfig, LimitsConfig, MrtrConfig, MtlsConfig,
        PrincipalConfig, ReadyzConfig, TlsConfig, UpstreamCommandConfig, UpstreamTlsConfig,
    };
    pub use crate::config::{
        Config, ConfigErrors, ConfigProblem, HandleConfig, LogConfig, LogFormat, MtlsIdentity,
        OnStoreError, Overrides, PrincipalSource, SingleUseConfig, SingleUseStore, StateConfig,
        TimeoutsConfig, WaitReplicas, env_var_for,
    };

    /// Reloading a running sidecar's configuration.
    pub mod reload {
        pub use crate::config::reload::{ConfigSource, ReloadOutcome};
    }
}

/// Refusals and how a client sees them.
pub mod error {
    pub use crate::error::RefusalMetrics;
    pub use crate::error::{ErrorKind, ProxyError, Resource, Share, UpstreamError};
}

/// Strict scanning and writing of JSON-RPC messages.
pub mod jsonrpc {
    #[cfg(feature = "oracle")]
    pub use crate::jsonrpc::classify;
    pub use crate::jsonrpc::{
        Answer, ENVELOPE_FIELDS, ERROR_FIELDS, EnvelopeField, HEADER_MISMATCH, INVALID_PARAMS,
        INVALID_REQUEST, JsonView, LiteArena, LiteJson, Message, PARSE_ERROR, Params, ParamsField,
        ParseError, Refused, ResultField, Scanned, ScannedBody, best_effort_id, check_reserved,
        check_result_fields, fold, parse_bounded, scan, scan_answer, serialize,
    };
    pub use crate::jsonrpc::{Index, NotAnObject};
}

/// Facts about MCP messages.
pub mod mcp {
    #[cfg(feature = "oracle")]
    pub use crate::mcp::asks_for_input;
    pub use crate::mcp::{MethodClass, header_target_field};
}

/// The multi-round rules and single use.
pub mod policy {
    pub use crate::policy::PolicyMetrics;
    pub use crate::policy::{Consumption, MrtrRefusal};

    /// Answers checked against the questions they answer.
    pub mod answers {
        pub use crate::policy::answers::{
            BadAnswer, MAX_QUESTIONS_BYTES, QuestionsTooLarge, check, record,
        };
    }
    /// The client's declared capabilities against a round.
    pub mod capabilities {
        pub use crate::policy::capabilities::{Declared, Missing, check};
    }
    /// A flow's round and age limits.
    pub mod flow {
        pub use crate::policy::flow::{FlowLimits, RoundLimit};
    }
    /// A round's questions.
    pub mod questions {
        pub use crate::policy::questions::{Question, Round};
    }
    /// Revocation of a caller's states and handles.
    pub mod revocation {
        pub use crate::policy::revocation::Revocations;
    }
    /// Which targets are single-use.
    pub mod single_use {
        pub use crate::policy::single_use::SingleUsePolicy;
    }
}

/// The data path's phases, for the fuzzers that drive them directly.
pub mod proxy {
    pub use crate::proxy::PathMetrics;
    pub use crate::proxy::{Meters, SealFailure, SseEvent, StatusClass};

    /// Step 4: the gate.
    pub mod gate {
        pub use crate::proxy::gate::{Refusal, check_message};
    }
    /// Step 8: sealing an answer.
    pub mod response {
        pub use crate::proxy::response::{ResponseSealer, SealContext, Withheld};
    }
}

/// The metrics registry.
pub mod registry {
    pub use crate::registry::Registry;
}

/// Connections.
pub mod server {
    pub use crate::server::ConnectionMetrics;
    pub use crate::server::Listener;
}

/// Event framing and the streaming sealer.
pub mod sse {
    pub use crate::sse::SseError;
    pub use crate::sse::{
        Buffered, EventFramer, EventRewriter, Rewrite, SseRewriteBody, StreamFailure, event_data,
        split_lines,
    };
}

/// A stdio upstream run as the sidecar's child: its metric labels.
pub mod stdio {
    pub use crate::stdio::StdioMetrics;
    pub use crate::stdio::{BridgeRefusal, CutOff, Dropped, SessionEnd, Unmatched};
}

/// The shared store.
pub mod store {
    pub use crate::store::{Consumed, ConsumptionId, Owner, Store, StoreError, StoreKind};

    /// The Redis store.
    pub mod redis {
        pub use crate::store::redis::RedisStore;
    }
    /// The in-process store.
    pub mod memory {
        pub use crate::store::memory::{MemoryStore, RECORD_OVERHEAD_BYTES, RecordBounds};
    }
}

/// The audit record.
pub mod telemetry {
    /// One audit line per request.
    pub mod audit {
        pub use crate::telemetry::audit::Outcome;
    }
}

/// Printable client text.
pub mod text {
    pub use crate::text::{Clipped, printable};
}

/// The crypto seam: states and handles.
pub mod token {
    pub use crate::token::OpenError;
    pub use crate::token::claims::binding::BindingError;
    pub use crate::token::keyring::Unsealed;
    pub use crate::token::{
        Flow, Frame, KeyMetrics, KeyRingError, Opened, Questions, Rejection, StateText,
    };
    pub use crate::token::{
        HandleReject, KeyId, KeyRing, Reject, RequestBinding, SealOptions, StateSealer,
        args_digest, generate_secret, max_token_bytes, now,
    };

    /// The reference SDK's JSON spelling.
    pub mod canonical {
        pub use crate::token::canonical::{CanonicalError, write_python_json};
    }
}

/// Handles and idempotent writes: their metric labels.
pub mod tools {
    pub use crate::tools::ToolMetrics;
    pub use crate::tools::{HandleResult, IdempotencyResult};
}

/// The build's name.
pub mod version {
    pub use crate::version::{COMMIT, LONG, VERSION};
}

/// The admin port: readiness.
pub mod admin {
    pub use crate::admin::Readiness;
}

/// The listener's TLS.
pub mod tls {
    pub use crate::tls::{FileError, TlsMetrics};
}
