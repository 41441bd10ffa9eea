//! nestbox exec layer (see ARCHITECTURE.md).
