//! Read-only SPI queries.
//!
//! pgrx 0.18's `Spi::get_one` (and `get_one_with_args`, `get_two`, ...) run their query through
//! `SpiClient::update`, which first assigns the transaction an id (`GetCurrentTransactionId`).
//! On a hot standby that is an ERROR, "cannot assign TransactionIds during recovery":
//! `shard_id_check()` failed on every standby, the place monitoring asks first. On a primary it
//! spends a transaction id on a read and makes a reading transaction write a commit record.
//! These run the query with `SpiClient::select`, which does neither. `clippy.toml` forbids the
//! others outside the tests, so that the next query cannot go back to them by accident.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi;

/// The first column of the first row of `query` (None: no row, or NULL).
pub fn one<A: FromDatum + IntoDatum>(query: &str) -> spi::Result<Option<A>> {
    one_with_args(query, &[])
}

/// [`one`] with `$1`, `$2`, ... bound to `args`.
pub fn one_with_args<A: FromDatum + IntoDatum>(
    query: &str,
    args: &[DatumWithOid<'_>],
) -> spi::Result<Option<A>> {
    Spi::connect(|client| {
        let rows = client.select(query, Some(1), args)?;
        if rows.is_empty() {
            return Ok(None); // (pgrx's get_one says InvalidPosition there)
        }
        rows.first().get_one()
    })
}
