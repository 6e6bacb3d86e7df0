//! The delayed queue's second store: PostgreSQL, for a queue past what ZooKeeper should hold
//! in every server's memory (issue 55). ZooKeeper keeps who owns, the members, the fencing
//! token and the ticks' ledger; this store keeps pending submissions, their payloads, the ids it
//! remembers and their run records.
//!
//! Owns: the connection (`handle`: one client, connected again after the server went away),
//! the statements it prepares (`statements`), why a request failed (`error`), the schema and
//! its migrations by version (`schema`), the wake-up on a submit (`listen`: `LISTEN`/`NOTIFY`),
//! the fence — a lock group's newest fencing token, which every claim checks in its own
//! statement (`fence`) — submit, end, cancel and find (`queue`), the claims (`claims`: the
//! fire machine's chosen ones, or whatever is due with `FOR UPDATE SKIP LOCKED`), the open runs'
//! records and the history (`runs`), the runs' changes in the order of their transactions, for the
//! event stream and the console (`feed`), what is kept and for how long (`retention`: `history`,
//! the remembered ids, empty days dropped), and the day partitions they fill (`partitions`).
//! Must not: name `zk` (the fencing token comes from the lock driver through its caller), decide
//! when anything fires (the fire machine), or check a submission against the schedule.

mod claims;
mod error;
mod feed;
mod fence;
mod handle;
mod listen;
mod partitions;
mod queue;
mod retention;
mod runs;
mod schema;
mod statements;
pub(super) mod submissions;

pub use claims::{Chosen, ChosenClaim, Claimed, ClaimedBatch, Mark};
pub use error::StoreError;
pub use feed::RunChange;
pub use handle::{PgStore, REQUEST_BOUND};
pub use listen::Submit;
pub use queue::{Ended, Where};
pub use retention::Pruned;
pub use runs::{OpenRun, Updated};
