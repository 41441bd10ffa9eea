//! The gate (guard, hooks, approval) on its own and in front of a real backend: hook programs
//! are real scripts run as processes, approvals go through a scripted approver or the real
//! terminal prompt over a socket, and the session tests run the local backend through the cage.

mod common;

mod approval;
mod hooks;
mod session;
