//! Where a token's ceiling holds ([`switchboard_session::Ceiling`] says what it allows).
//!
//! A token made with `--ceiling POLICY` carries the policy's text ([`TokenCeiling`]); a session
//! it starts keeps that text in its record ([`Origin::ceiling`]), so the ceiling bounds every
//! run of the session, on every node, whoever acts on it later:
//!
//! - [`bound`]: each launch (create, resume, a node taking it over) loads the session's policy
//!   under the ceiling, refusing an allow rule, an `allowed_tools` entry or a permission mode
//!   beyond it;
//! - [`check_mode`]: a later mode change is held to it as well;
//! - [`check_answer`]: the token answers with an allow only what the ceiling itself allows
//!   (every face asks it, through `faces::check_answer_to`).
//!
//! A ceiling may be given to tokens below `admin` only (an admin token makes tokens, so a
//! ceiling on it would not hold); an `operate` token with a ceiling may give the sessions it
//! starts an inline `policy`, since the ceiling bounds it ([`policy_within_reach`]).
//!
//! Each check answers the sentence a refusal says (the daemon's `403 forbidden`).

use std::sync::Arc;

use switchboard_session::{
    AnswerBehavior, Ceiling, MatchContext, PendingPermission, PermissionAnswer, Policy,
};
use switchboard_store::{Launch, Origin};

/// A token's ceiling: its text as kept, and parsed.
#[derive(Debug, Clone)]
pub struct TokenCeiling {
    /// The policy's TOML, as the token keeps it.
    pub text: Arc<str>,
    /// Parsed.
    pub ceiling: Arc<Ceiling>,
}

impl TokenCeiling {
    /// Parses token `token`'s ceiling `text`.
    pub fn new(token: &str, text: &str) -> Result<TokenCeiling, String> {
        let ceiling = Ceiling::new(token, text)
            .map_err(|error| format!("the ceiling of token {token} is not a policy: {error}"))?;
        Ok(TokenCeiling { text: Arc::from(text), ceiling: Arc::new(ceiling) })
    }
}

/// The largest ceiling a token carries.
pub const MAX_CEILING_BYTES: usize = 64 * 1024;

/// The ceiling a session was started under, if any.
pub fn of_launch(launch: &Launch) -> Result<Option<Ceiling>, String> {
    let Some(Origin { token, ceiling: Some(text), .. }) = &launch.origin else {
        return Ok(None);
    };
    Ceiling::new(token, text).map(Some).map_err(|error| {
        format!("the ceiling this session was started under is not a policy: {error}")
    })
}

/// `policy` for a launch: as it is, or, for a session started under a ceiling, bounded by it,
/// once the launch's own policy, `allowed_tools` and permission mode are found within it.
pub fn bound(launch: &Launch, policy: Policy) -> Result<Policy, String> {
    let Some(ceiling) = of_launch(launch)? else {
        return Ok(policy);
    };
    // The daemon's default policy is not the token's choice: only one the request gave is
    // held to the ceiling here (every call is, by the bounded policy).
    if launch.policy.is_some() {
        ceiling.check_policy(&policy)?;
    }
    for rule in &launch.allowed_tools {
        ceiling.check_allow(rule)?;
    }
    ceiling.check_mode(launch.permission_mode.as_deref().unwrap_or("default"))?;
    Ok(policy.under(Arc::new(ceiling)))
}

/// Whether a session launched as `launch` may be put in permission mode `mode`.
pub fn check_mode(launch: &Launch, mode: &str) -> Result<(), String> {
    match of_launch(launch)? {
        Some(ceiling) => ceiling.check_mode(mode),
        None => Ok(()),
    }
}

/// Whether a token with `ceiling` may answer `pending` (of a session in `cwd`) with `answer`:
/// an allow only of what the ceiling allows (the input that runs: the answer's, if it gives
/// one), once: never with rules for the CLI, nor "always". A deny is always the token's to
/// give.
pub fn check_answer(
    ceiling: &TokenCeiling,
    token: &str,
    pending: &PendingPermission,
    answer: &PermissionAnswer,
    cwd: &str,
) -> Result<(), String> {
    if answer.behavior != AnswerBehavior::Allow {
        return Ok(());
    }
    if answer.updated_permissions.as_ref().is_some_and(|updates| !updates.is_empty()) {
        return Err(format!(
            "token {token} has a ceiling: it answers without updated_permissions (rules it gives the CLI would run calls the ceiling never sees)"
        ));
    }
    let context = MatchContext { cwd: cwd.into(), home: std::env::var_os("HOME").map(Into::into) };
    let input = answer.updated_input.as_ref().unwrap_or(&pending.input);
    ceiling.ceiling.check_answer(&pending.tool_name, input, &context)?;
    if answer.remember {
        // "Always" sends the CLI its own suggestions, which may reach further than the call.
        return Err(format!(
            "token {token} has a ceiling: it allows a call once, never always (a person may)"
        ));
    }
    Ok(())
}

/// Whether a token with a ceiling may set `policy` on a session it starts: inline text only
/// (a path would have the daemon read a file of the token's choosing).
pub fn policy_within_reach(policy: &str) -> bool {
    policy.trim() != "auto-approve" && (policy.contains('\n') || policy.contains('='))
}
