/* Reference generators for bench/speed.py: what a generator that calls nextval() and reads the
 * clock costs at the least, measured in the same run as next_shard_id instead of computed. Not
 * part of the extension, and neither guards anything: both repeat ids past 1024 a millisecond.
 *
 *   reference_unguarded_id(seq regclass, shard int)  nextval_internal() + one clock_gettime()
 *       + the layout's shifts: the naive port, written in C, and the cap every guarded build is
 *       measured against
 *   reference_one_lock_id(seq regclass, shard int)   the same with the clock read under one
 *       PostgreSQL spinlock (SpinLockAcquire/Release, uncontended): the least a guard in shared
 *       memory adds, one atomic read-modify-write, before it keeps any state
 *
 * Timed by bench/speed_compare.sh and counted by bench/cost_gate.sh (GATE_REFERENCE=1), both
 * building it with build_reference_ids (scripts/lib.sh), the server's own headers, no PGXS:
 *   gcc -O2 -fPIC -shared -I"$(pg_config --includedir-server)" reference_ids.c -o reference_ids.so
 * and declared by absolute path (CREATE FUNCTION ... LANGUAGE c AS '/path/reference_ids.so').
 */
#include "postgres.h"

#include <time.h>

#include "commands/sequence.h"
#include "fmgr.h"
#include "storage/spin.h"

PG_MODULE_MAGIC;

/* 2025-01-01 00:00:00 UTC in Unix ms; any fixed epoch costs the same */
#define REFERENCE_EPOCH_MS INT64CONST(1735689600000)

static slock_t one_lock;
static bool one_lock_ready = false;

static inline int64
clock_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (int64) now.tv_sec * 1000 + now.tv_nsec / 1000000 - REFERENCE_EPOCH_MS;
}

static inline int64
compose(int64 ms, int32 shard, int64 value)
{
	return (ms << 23) | ((int64) (shard & 8191) << 10) | (value & 1023);
}

PG_FUNCTION_INFO_V1(reference_unguarded_id);
Datum
reference_unguarded_id(PG_FUNCTION_ARGS)
{
	int64		value = nextval_internal(PG_GETARG_OID(0), true);

	PG_RETURN_INT64(compose(clock_ms(), PG_GETARG_INT32(1), value));
}

PG_FUNCTION_INFO_V1(reference_one_lock_id);
Datum
reference_one_lock_id(PG_FUNCTION_ARGS)
{
	int64		value = nextval_internal(PG_GETARG_OID(0), true);
	int64		ms;

	if (!one_lock_ready)
	{
		SpinLockInit(&one_lock);
		one_lock_ready = true;
	}
	SpinLockAcquire(&one_lock);
	ms = clock_ms();
	SpinLockRelease(&one_lock);
	PG_RETURN_INT64(compose(ms, PG_GETARG_INT32(1), value));
}
