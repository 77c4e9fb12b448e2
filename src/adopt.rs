//! `shard_id_adopt(tbl, col, shard)`: an existing serial, bigserial, identity or
//! `DEFAULT nextval(...)` column switched to `DEFAULT next_shard_id(<its sequence>, shard)`.
//!
//! The function is PL/pgSQL (`sql/adopt.sql`, where its decisions are written down): it is a
//! series of catalog reads and DDL statements, which SQL says more plainly than SPI calls would.

use pgrx::prelude::*;

extension_sql_file!(
    "../sql/adopt.sql",
    name = "shard_id_adopt",
    requires = ["next_shard_id", decode::shard_id_compose],
);
