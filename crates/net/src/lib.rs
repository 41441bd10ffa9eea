//! nestbox net layer (see ARCHITECTURE.md).
