//! zk
