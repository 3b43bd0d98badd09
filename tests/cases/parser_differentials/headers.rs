//! Headers a router and the upstream could read differently: routing headers that
//! disagree with the body or come twice, and an identity header that is not exactly one.

use super::{BASE, Row, mismatch, refused, row};
use mcp_state_guard::facade::error::ErrorKind;

pub(super) fn rows() -> Vec<Row> {
    let identity = || refused(400, ErrorKind::PrincipalHeader);
    let (mcp_method, mcp_name) = ("mcp-method", "mcp-name");
    vec![
        // Routing headers a router and the upstream could read differently.
        row("Mcp-Method disagrees", BASE, mismatch()).set(mcp_method, Some("tools/list")),
        row("Mcp-Method case", BASE, mismatch()).set(mcp_method, Some("Tools/Call")),
        row("Mcp-Name disagrees", BASE, mismatch()).set(mcp_name, Some("deprovision")),
        row("Mcp-Method twice", BASE, mismatch()).add(mcp_method, "tools/call"),
        row("Mcp-Name twice", BASE, mismatch()).add(mcp_name, "provision"),
        row("version twice", BASE, mismatch()).add("mcp-protocol-version", "2025-11-25"),
        // Who is calling must be unambiguous.
        row("identity twice", BASE, identity())
            .add("x-forwarded-user", "alice")
            .add("x-forwarded-user", "bob"),
        row("identity empty", BASE, identity()).add("x-forwarded-user", ""),
    ]
}
