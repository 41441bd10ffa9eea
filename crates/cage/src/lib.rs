//! nestbox cage layer (see ARCHITECTURE.md).
