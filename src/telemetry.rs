//! What the sidecar tells its operators about each request: [`audit`] writes the one
//! record each request leaves. Client text in it goes through [`crate::text`].

pub(crate) mod audit;
