//! Parallel memcpy for the staged (pageable) paths: one core moves ~10 GB/s, the bus far more.
//!
//! A process-wide pool of worker threads, started on first use and grown to the largest thread
//! count asked for (at most [`MAX_THREADS`]). [`copy`] hands up to `threads - 1` workers a job
//! each that takes [`MIN_PART`]-byte chunks from one shared range ([`Split`]), takes chunks on
//! the calling thread too, runs any job no worker picked up yet, and returns only once every
//! job is done: the wait is in the function body, so nothing here rests on a destructor
//! running. Chunks rather than one fixed part per thread, so that a worker that wakes late
//! delays nothing: the others take its share. Spawning threads per copy instead cost 10–20 µs
//! a thread, which at 16 threads is a third of the time a 16 MiB chunk takes to copy at 40 GB/s.
//! A forked child starts a pool of its own (the parent's workers do not exist in it).
//! Pure host code: no Vulkan.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The most threads one copy uses (and the pool holds).
pub const MAX_THREADS: usize = 64;
/// No part of a [`copy`] or [`copy_with`] is smaller than this, but the copy's last: below it a parked thread's
/// wake-up (a few µs to tens) costs more than it saves (256 KiB take ~25 µs on one core).
/// [`copy_in_parts`] takes smaller parts, for threads that already poll.
pub const MIN_PART: usize = 256 << 10;

/// One job of a copy: chunks taken from the front of `split` until it is used up (offsets from
/// `dst`/`src`, raw addresses the caller of [`copy`] or [`copy_front`] keeps valid until it
/// returns), and the copy's completion counter.
struct Job {
    dst: usize,
    src: usize,
    split: Arc<Split>,
    /// Non-temporal stores ([`Stores::Streaming`]).
    stream: bool,
    /// How long the worker that ran this job polls for the next one before it parks.
    spin: Duration,
    done: Arc<Done>,
}

/// A range shared by two consumers from its two ends: CPU threads take chunks from the front
/// ([`copy_front`]), someone else (a copy engine) from the back, each until they meet, so the
/// faster one does more without knowing the rates in advance ([`copy_with`] uses the front
/// only, the calling thread among the takers). Chunk boundaries are multiples of
/// 4 KiB from the start (the end of the range may be anywhere).
pub(crate) struct Split {
    /// `[front, back)`: what nobody has taken yet.
    ends: Mutex<(usize, usize)>,
    front_chunk: usize,
}

impl Split {
    /// A range of `len` bytes whose front is taken `front_chunk` bytes at a time (rounded up to
    /// 4 KiB).
    pub(crate) fn new(len: usize, front_chunk: usize) -> Arc<Split> {
        let front_chunk = front_chunk.max(1).next_multiple_of(4096);
        // This thread's spare from an earlier copy, when no worker still holds a clone of it
        // (then nobody else can see it): a synchronous copy allocates nothing on its hot path.
        if let Some(mut a) = take_spare(&SPARE_SPLIT) {
            if let Some(sp) = Arc::get_mut(&mut a) {
                *sp.ends.get_mut().unwrap_or_else(PoisonError::into_inner) = (0, len);
                sp.front_chunk = front_chunk;
                return a;
            }
        }
        Arc::new(Split { ends: Mutex::new((0, len)), front_chunk })
    }

    /// Keeps `this` as the thread's spare for the next [`Split::new`] (see there).
    pub(crate) fn recycle(this: Arc<Split>) {
        keep_spare(&SPARE_SPLIT, this);
    }

    /// The next chunk from the front, `(offset, len)`, or `None` when nothing is left.
    pub(crate) fn take_front(&self) -> Option<(usize, usize)> {
        let mut e = lock(&self.ends);
        let n = self.front_chunk.min(e.1 - e.0);
        if n == 0 {
            return None;
        }
        let at = e.0;
        e.0 += n;
        Some((at, n))
    }

    /// The next chunk of about `chunk` bytes from the back, `(offset, len)`, starting at a
    /// multiple of 4 KiB (or at the front), or `None` when nothing is left.
    pub(crate) fn take_back(&self, chunk: usize) -> Option<(usize, usize)> {
        let mut e = lock(&self.ends);
        if e.0 >= e.1 {
            return None;
        }
        let start = e.1.saturating_sub(chunk.max(1)) / 4096 * 4096;
        let start = start.max(e.0);
        let n = e.1 - start;
        e.1 = start;
        Some((start, n))
    }

    /// Bytes taken from the front so far (all of them once the split is used up).
    pub(crate) fn front_taken(&self) -> usize {
        lock(&self.ends).0
    }

    /// Bytes not taken yet.
    #[cfg(test)]
    fn left(&self) -> usize {
        let e = lock(&self.ends);
        e.1 - e.0
    }
}

/// How a copy writes its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stores {
    /// `memcpy`: the destination's lines are read into the cache before they are written.
    Cached,
    /// Non-temporal (streaming) stores on x86-64: whole lines go to memory without reading
    /// them first, a third less memory traffic for a destination that is not in the cache, and
    /// nothing of it left in the cache. Elsewhere the same as `Cached`.
    Streaming,
}

/// Two spares of a thread's finished copies: a worker can hold its clone of one a moment after
/// the copy returned (it signals completion, then drops its job), and then the other is free.
type Spares<T> = std::cell::RefCell<[Option<Arc<T>>; 2]>;

thread_local! {
    /// [`Split`]s and [`Done`]s this thread's finished copies left for the next ones.
    static SPARE_SPLIT: Spares<Split> = const { std::cell::RefCell::new([None, None]) };
    static SPARE_DONE: Spares<Done> = const { std::cell::RefCell::new([None, None]) };
}

/// A spare nobody else holds (so `Arc::get_mut` succeeds on it), taken out of `spares`. `None`
/// also while the thread's locals are being destroyed (a copy from another local's destructor).
fn take_spare<T>(spares: &'static std::thread::LocalKey<Spares<T>>) -> Option<Arc<T>> {
    spares
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let i = c.iter_mut().position(|a| a.as_mut().is_some_and(|a| Arc::get_mut(a).is_some()))?;
            c[i].take()
        })
        .ok()
        .flatten()
}

/// Keeps `a` for [`take_spare`]: in an empty place, else in place of one still held elsewhere,
/// else of the first; dropped when the thread's locals are gone.
fn keep_spare<T>(spares: &'static std::thread::LocalKey<Spares<T>>, a: Arc<T>) {
    let _ = spares.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            let held = |x: &Option<Arc<T>>| x.as_ref().is_some_and(|x| Arc::strong_count(x) > 1);
            let i = c.iter().position(Option::is_none).or_else(|| c.iter().position(held)).unwrap_or(0);
            c[i] = Some(a);
        }
    });
}

/// Jobs left of one copy. The count is atomic so that the caller can poll it ([`finish`]);
/// the last job to finish takes `m` before it notifies `cv`, so a caller that checked the count
/// under `m` and then waits cannot miss that notification.
struct Done {
    left: AtomicUsize,
    m: Mutex<()>,
    cv: Condvar,
}

impl Done {
    fn new(n: usize) -> Done {
        Done { left: AtomicUsize::new(n), m: Mutex::new(()), cv: Condvar::new() }
    }

    /// Counts one job of the copy as finished (everything it wrote before happens-before the
    /// caller's return from [`finish`]).
    fn finished_one(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = lock(&self.m);
            self.cv.notify_all();
        }
    }
}

struct Pool {
    /// Jobs not taken yet, the number of workers, until when every worker without a job polls
    /// rather than parks ([`warm`]), and how many more wake-ups workers that find no job pass
    /// on ([`warm`] wakes one: each wake is a system call).
    queue: Mutex<(VecDeque<Job>, usize, Option<Instant>, usize)>,
    cv: Condvar,
    /// The queue's length, kept with it under its lock, read without it by spinning workers.
    queued: AtomicUsize,
    /// Workers polling for a job right now, or about to ([`polling`]): counted from the
    /// completion of a job with a polling time (before that job's copy can return) or from the
    /// start of the pool's polling time, until they take a job or park.
    polling: AtomicUsize,
}

/// A process-wide value of which a forked child gets a new one, made by `make` at its first
/// use there: what the parent's threads may have held locked at the fork (a `Mutex` copied
/// locked has no owner in the child, which has none of those threads) or filled with the
/// parent's objects. The old value is left as it is (leaked), never touched again.
pub(crate) struct PerFork<T: 'static> {
    cur: AtomicPtr<Generation<T>>,
    make: fn() -> T,
}

struct Generation<T> {
    /// The fork generation it was made in ([`fork_generation`]).
    generation: u64,
    value: T,
}

impl<T: Send + Sync> PerFork<T> {
    pub(crate) const fn new(make: fn() -> T) -> PerFork<T> {
        PerFork { cur: AtomicPtr::new(std::ptr::null_mut()), make }
    }

    /// This process's value, if it was made already (since the last fork); makes nothing.
    pub(crate) fn current(&'static self) -> Option<&'static T> {
        // SAFETY: `cur` only ever holds null or a leaked (never freed) generation.
        let g = unsafe { self.cur.load(Ordering::Acquire).as_ref() }?;
        (g.generation == fork_generation()).then_some(&g.value)
    }

    /// This process's value.
    pub(crate) fn get(&'static self) -> &'static T {
        let generation = fork_generation();
        loop {
            let cur = self.cur.load(Ordering::Acquire);
            // SAFETY: `cur` only ever holds null or a leaked (never freed) generation.
            if let Some(g) = unsafe { cur.as_ref() } {
                if g.generation == generation {
                    return &g.value;
                }
            }
            let new = Box::into_raw(Box::new(Generation { generation, value: (self.make)() }));
            if self.cur.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire).is_err() {
                // SAFETY: `new` was never shared: another thread installed its value first.
                drop(unsafe { Box::from_raw(new) });
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pool of this process. A forked child gets a new one ([`PerFork`]): the parent's
/// workers do not exist in the child, its queue may hold the parent's jobs (raw addresses of
/// the parent's copies, some in mappings the child lacks) and its lock may have been held by a
/// parent thread at the fork.
fn pool() -> &'static Pool {
    POOL.get()
}

static POOL: PerFork<Pool> = PerFork::new(|| Pool {
    queue: Mutex::new((VecDeque::new(), 0, None, 0)),
    cv: Condvar::new(),
    queued: AtomicUsize::new(0),
    polling: AtomicUsize::new(0),
});

/// How many of this process's workers are polling for a job right now, or have just finished
/// one and are about to (none before the pool's first use here). A copy split into parts
/// small enough that a parked worker's wake-up (tens of µs) would cost more than its part
/// saves asks this first; [`warm`] gets them polling.
pub(crate) fn polling() -> usize {
    POOL.current().map_or(0, |p| p.polling.load(Ordering::Relaxed))
}

/// Has at least `n` workers (started if the pool has fewer) poll for a job until `spin` from
/// now, without giving them anything to copy, and returns at once: for a caller that found too
/// few [`polling`] for a copy in small parts, took another way this time, and expects more
/// such copies soon. Every worker without a job polls until then (a worker woken for a job
/// another took polls too), so one that eats several jobs cannot leave the rest parked.
/// Nothing when `spin` is zero.
pub(crate) fn warm(n: usize, spin: Duration) {
    let n = n.min(MAX_THREADS);
    if n == 0 || spin.is_zero() {
        return;
    }
    let p = pool();
    p.grow(n);
    let until = Instant::now() + spin;
    {
        let mut q = lock(&p.queue);
        q.2 = Some(q.2.map_or(until, |t| t.max(until)));
        q.3 = q.3.max(n - 1);
    }
    // A parked worker wakes to find no job and the pool's polling time ahead: it wakes the
    // next (`q.3`) and polls. One system call here; the others are the workers'.
    p.cv.notify_one();
}

/// Bumped in every forked child (a `pthread_atfork` handler).
static FORK_GEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_fork_child() {
    // Async-signal-safe: one atomic add.
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
}

/// The fork generation of this process: how many forks lie between the process that first
/// asked and this one (the memcpy pool, and the device layer's objects, compare the one they
/// were made in). Installs the handler on first use.
pub(crate) fn fork_generation() -> u64 {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a child handler that only does an atomic add.
        let r = unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
        if r != 0 {
            log::warn!("pthread_atfork failed ({r}): objects are not inert in forked children");
        }
    });
    FORK_GEN.load(Ordering::Acquire)
}

impl Pool {
    /// Starts workers until there are `n` (bounded by MAX_THREADS); a failed spawn leaves fewer,
    /// and the caller's own thread still does every part nobody takes.
    fn grow(&'static self, n: usize) {
        let mut q = lock(&self.queue);
        while q.1 < n.min(MAX_THREADS) {
            let spawned = std::thread::Builder::new().name("vkhost-memcpy".into()).spawn(move || self.work());
            if spawned.is_err() {
                break;
            }
            q.1 += 1;
        }
    }

    fn work(&self) {
        // Until when this worker polls for its next job instead of parking: a staged copy runs
        // in batches a few microseconds apart (memcpy, submit, the next memcpy), and a parked
        // worker can take tens of microseconds to wake on a busy or virtualized machine.
        let mut poll_until: Option<Instant> = None;
        // Whether this worker is counted in `polling`.
        let mut counted = false;
        loop {
            let job = {
                let mut q = lock(&self.queue);
                loop {
                    if let Some(j) = q.0.pop_front() {
                        self.queued.store(q.0.len(), Ordering::Relaxed);
                        break j;
                    }
                    // Woken by `warm` (or by a worker it woke): wake the next parked worker.
                    if q.3 > 0 {
                        q.3 -= 1;
                        self.cv.notify_one();
                    }
                    // This worker's own polling time after its last job, or the pool's
                    // ([`warm`]), whichever ends later. A job seen while polling but taken by
                    // another thread: poll on for the rest of the time rather than park.
                    let now = Instant::now();
                    match [poll_until, q.2].into_iter().flatten().filter(|&t| t > now).max() {
                        Some(t) => {
                            if !counted {
                                self.polling.fetch_add(1, Ordering::Relaxed);
                                counted = true;
                            }
                            drop(q);
                            self.poll(t);
                            q = lock(&self.queue);
                        }
                        None => {
                            if counted {
                                self.polling.fetch_sub(1, Ordering::Relaxed);
                                counted = false;
                            }
                            q = self.cv.wait(q).unwrap_or_else(PoisonError::into_inner);
                        }
                    }
                }
            };
            if counted {
                self.polling.fetch_sub(1, Ordering::Relaxed);
            }
            let spin = job.spin;
            // A worker that will poll after this job counts itself before the job's copy can
            // return (`run` counts it, then the job done): the copy's caller, writing again at
            // once, finds it counted rather than on its way back to polling.
            counted = !spin.is_zero();
            run(job, counted.then_some(&self.polling));
            poll_until = counted.then(|| Instant::now() + spin);
        }
    }

    /// Returns once a job is queued or `until` has passed.
    fn poll(&self, until: Instant) {
        spin_while(until, || self.queued.load(Ordering::Relaxed) == 0);
    }
}

/// Spins while `busy()` holds, until `until` at the latest (the clock read every 64 rounds).
fn spin_while(until: Instant, busy: impl Fn() -> bool) {
    let mut i = 0u32;
    while busy() {
        std::hint::spin_loop();
        i = i.wrapping_add(1);
        if i % 64 == 0 && Instant::now() >= until {
            return;
        }
    }
}

/// Runs `job`, then adds one to `count` (the pool's `polling`, for a worker that will poll
/// next), then counts the job done.
fn run(job: Job, count: Option<&AtomicUsize>) {
    // SAFETY: the caller of `copy_front` guarantees `[0, len)` from both bases until it
    // returns, which is after this job's completion is counted below.
    unsafe { copy_front_chunks(job.dst as *mut u8, job.src as *const u8, &job.split, job.stream) };
    if let Some(c) = count {
        c.fetch_add(1, Ordering::Relaxed);
    }
    job.done.finished_one();
}

/// Copies chunks taken from the front of `split` until it is used up: a worker's job, and the
/// calling thread's share in [`copy_with`].
///
/// # Safety
/// `src` is readable and `dst` writable for the split's length, and they do not overlap; every
/// chunk is taken once, so whoever else takes chunks of `split` copies disjoint bytes.
unsafe fn copy_front_chunks(dst: *mut u8, src: *const u8, split: &Split, stream: bool) {
    while let Some((at, n)) = split.take_front() {
        // SAFETY: `[at, at + n)` lies within the split's length (the caller's contract), and
        // was taken by no one else.
        unsafe { copy_part(dst.add(at), src.add(at), n, stream) };
    }
}

/// One part: `memcpy`, or streaming stores then a store fence (so the bytes are visible to
/// whoever learns of the part's completion, as after a `memcpy`).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
unsafe fn copy_part(dst: *mut u8, src: *const u8, len: usize, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if stream && len >= 4096 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Bytes until `dst` is 16-byte aligned, as `_mm_stream_si128` needs.
        let head = ((16 - (dst as usize) % 16) % 16).min(len);
        // SAFETY: every access is within `[src, src+len)` / `[dst, dst+len)` (the caller's
        // contract): the head, then 64-byte blocks while 64 bytes remain, then the tail; the
        // stores go to 16-byte-aligned addresses (`dst + head` is aligned); SSE2 is part of
        // x86-64. The fence orders the streaming stores before anything this thread does next.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 64 <= len {
                let s = src.add(i).cast::<__m128i>();
                let d = dst.add(i).cast::<__m128i>();
                let (a, b, c, e) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
                i += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
            _mm_sfence();
        }
        return;
    }
    let _ = stream;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Copies `len` bytes from `src` to `dst` using up to `threads` threads (the caller's included).
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes until this returns, and they do not
/// overlap.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, threads: usize) {
    // SAFETY: forwarded contract.
    unsafe { copy_with(dst, src, len, threads, Stores::Cached, Duration::ZERO) }
}

/// [`copy`], writing the destination as `stores` says; the workers poll for a next job for
/// `spin` before they park.
///
/// # Safety
/// As for [`copy`].
pub(crate) unsafe fn copy_with(dst: *mut u8, src: *const u8, len: usize, threads: usize, stores: Stores, spin: Duration) {
    // SAFETY: forwarded contract.
    unsafe { copy_in_parts(dst, src, len, threads, stores, spin, MIN_PART) }
}

/// [`copy_with`] in chunks of `part` bytes (rounded up to 4 KiB; a copy shorter than two parts
/// runs on the calling thread alone). Parts below [`MIN_PART`] pay only where the workers are
/// already [`polling`]: as the stores of a mid-size write into mapped device memory, whose
/// 64 KiB parts take ~2 µs each.
///
/// # Safety
/// As for [`copy`].
pub(crate) unsafe fn copy_in_parts(dst: *mut u8, src: *const u8, len: usize, threads: usize, stores: Stores, spin: Duration, part: usize) {
    let stream = stores == Stores::Streaming;
    let part = part.max(1).next_multiple_of(4096);
    let parts = (len / part).clamp(1, threads.clamp(1, MAX_THREADS));
    if parts <= 1 {
        // SAFETY: the caller's contract.
        unsafe { copy_part(dst, src, len, stream) };
        return;
    }
    // The caller and `parts - 1` workers take `part`-byte chunks from one shared range until it is
    // used up, rather than one fixed part each: a worker that wakes late (tens to hundreds of
    // microseconds on a busy or virtualized machine) finds less or nothing left, instead of
    // holding the whole copy until its part is done. The caller is `copy_front`'s "back" that
    // takes from the front too.
    let split = Split::new(len, part);
    // SAFETY: the caller's contract covers `[0, len)`, the split's length, from both bases; the
    // closure copies only chunks it takes.
    unsafe { copy_front(dst, src, &split, parts - 1, stores, spin, || copy_front_chunks(dst, src, &split, stream)) };
    Split::recycle(split);
}

/// Runs the jobs of `done` that no worker has taken yet (never wait on a worker that is not
/// there), then waits until every job of `done` is complete: polling the count for up to
/// `spin` (the workers' own polling time; a sleeping caller takes as long to wake as a parked
/// worker, which is most of a mid-size store's time), then asleep.
fn finish(p: &Pool, done: &Arc<Done>, spin: Duration) {
    loop {
        let job = {
            let mut q = lock(&p.queue);
            let i = q.0.iter().position(|j| Arc::ptr_eq(&j.done, done));
            let j = i.and_then(|i| q.0.remove(i));
            p.queued.store(q.0.len(), Ordering::Relaxed);
            j
        };
        match job {
            Some(j) => run(j, None),
            None => break,
        }
    }
    if done.left.load(Ordering::Acquire) == 0 {
        return;
    }
    if !spin.is_zero() {
        spin_while(Instant::now() + spin, || done.left.load(Ordering::Acquire) > 0);
    }
    let mut g = lock(&done.m);
    while done.left.load(Ordering::Acquire) > 0 {
        g = done.cv.wait(g).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Copies the front of `split` (a range of `src`/`dst`, offsets from them) on up to `threads`
/// pool threads (which poll for a next job for `spin` before they park) while the calling
/// thread runs `back`, which takes chunks from the back of the
/// same split and moves them some other way. Returns `back`'s result once every byte of the
/// split was taken and every front chunk is copied: chunks no worker took are copied here,
/// after `back` returned, so the whole range is always done (also when `back` stopped early,
/// or unwinds: the wait is then in a drop guard of this frame, which an unwinding runs).
///
/// # Safety
/// `src` is readable and `dst` writable for the split's length until this returns, and they do
/// not overlap; `back` touches only the chunks it takes.
pub(crate) unsafe fn copy_front<T>(
    dst: *mut u8,
    src: *const u8,
    split: &Arc<Split>,
    threads: usize,
    stores: Stores,
    spin: Duration,
    back: impl FnOnce() -> T,
) -> T {
    let stream = stores == Stores::Streaming;
    let n = threads.clamp(1, MAX_THREADS);
    let p = pool();
    p.grow(n);
    // This thread's spare, when no worker still holds it (as in `Split::new`).
    let spare = take_spare(&SPARE_DONE).and_then(|mut a| {
        *Arc::get_mut(&mut a)?.left.get_mut() = n;
        Some(a)
    });
    let done = spare.unwrap_or_else(|| Arc::new(Done::new(n)));
    {
        let mut q = lock(&p.queue);
        for _ in 0..n {
            q.0.push_back(Job { dst: dst as usize, src: src as usize, split: split.clone(), stream, spin, done: done.clone() });
        }
        p.queued.store(q.0.len(), Ordering::Relaxed);
    }
    // Workers that poll take the jobs without a wake-up (a system call even with nobody
    // asleep); jobs nobody takes the caller runs itself (`finish`).
    if p.polling.load(Ordering::Relaxed) < n {
        p.cv.notify_all();
    }
    /// Finishes the front however `back` ends: were it to unwind, the workers would otherwise
    /// go on reading and writing the caller's ranges after this frame is gone.
    struct Finish<'a>(&'a Pool, &'a Arc<Done>, Duration);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            finish(self.0, self.1, self.2);
        }
    }
    let r = {
        let _finish = Finish(p, &done, spin);
        back()
    };
    // Every job of this copy ran; a worker may still drop its clone of `done` a moment later
    // (`take_spare` then passes over it).
    keep_spare(&SPARE_DONE, done);
    r
}

/// The default thread count for staged copies: the machine's cores less two (all of them on
/// machines of up to 4 cores), at most 16. With every core copying, any other runnable thread
/// (the driver's, the system's) preempts one, and a staged copy waits for its straggler: on the
/// H200's 16 cores, 16 threads gave 16 MiB pageable copies a within-run spread of 34-57% (some
/// copies at 8-10 GB/s against medians of 30-33), 14 threads 2-7%, with medians equal or
/// better at 4 MiB-1 GiB and 2 cores' less CPU time (docs/PERFORMANCE.md, ninth session; one
/// later process still had such stragglers at 14, so other causes remain).
pub fn default_threads() -> usize {
    threads_for(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// [`default_threads`] for a machine of `cores` cores.
fn threads_for(cores: usize) -> usize {
    let n = if cores > 4 { cores - 2 } else { cores };
    n.clamp(1, 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while a parent thread held the pool's lock (a worker taking a job, say),
    /// after the parent had started workers: its copies get a pool of its own, with workers
    /// that exist, and finish. Before, the child's first copy of several parts waited forever
    /// on the lock no thread of the child would release, and the child counted the parent's
    /// workers as its own.
    #[test]
    fn a_forked_child_copies_on_a_pool_of_its_own() {
        let n = 8 * MIN_PART;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; n];
        // SAFETY: distinct vectors of `n` bytes.
        unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), n, 4) };
        assert!(dst == src);
        let before = pool() as *const Pool;
        let held = lock(&pool().queue);
        assert!(held.1 >= 1, "the parent's copy started no worker");
        // SAFETY: the child only copies with this module (threads, a lock, memcpy) and leaves
        // with `_exit`; glibc's allocator is fork-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let fresh = !std::ptr::eq(pool(), before) && lock(&pool().queue).1 == 0;
            let mut out = vec![0u8; n];
            // SAFETY: distinct vectors of `n` bytes.
            unsafe { copy(out.as_mut_ptr(), src.as_ptr(), n, 4) };
            let code = if !fresh {
                2
            } else if out != src {
                3
            } else {
                0
            };
            // SAFETY: leaves without destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(held);
        let start = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if start.elapsed() > Duration::from_secs(30) {
                // SAFETY: our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child's copy never finished (the parent's pool lock)");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(libc::WIFEXITED(status), "the child did not exit normally: {status:#x}");
        // Under valgrind (scripts/memcheck sets VKHOST_MEMCHECK) the exit code is valgrind's.
        if std::env::var("VKHOST_MEMCHECK").is_err() {
            assert_eq!(libc::WEXITSTATUS(status), 0, "2: the child used the parent's pool; 3: wrong bytes");
        }
    }

    #[test]
    fn the_default_leaves_two_cores_free_above_four() {
        let got: Vec<usize> = [1, 2, 4, 5, 8, 16, 18, 64].into_iter().map(threads_for).collect();
        assert_eq!(got, [1, 2, 4, 3, 6, 14, 16, 16]);
        assert!((1..=16).contains(&default_threads()));
    }

    #[test]
    fn copies_every_byte_with_any_thread_count() {
        for (len, threads) in
            [(0, 4), (1, 4), ((256 << 10) - 1, 8), ((1 << 20) + 7, 8), ((9 << 20) + 13, 1), ((9 << 20) + 13, 3), ((9 << 20) + 13, 64)]
        {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: distinct vectors of equal length.
            unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len, threads) };
            assert!(src == dst, "len {len}, threads {threads}");
        }
    }

    /// Streaming stores write exactly the bytes asked for, at any alignment of either side and
    /// any length (head, 64-byte blocks, tail), split over threads or not; nothing around the
    /// destination changes.
    #[test]
    fn streaming_stores_copy_exactly() {
        for (len, threads) in [(1, 1), (4095, 1), (4096, 1), (4096 + 63, 1), ((1 << 20) + 77, 1), ((1 << 20) + 77, 5), ((3 << 20) + 1, 16)]
        {
            for (so, dof) in [(0, 0), (1, 0), (0, 3), (5, 13), (15, 1)] {
                let src: Vec<u8> = (0..len + 16).map(|i| (i * 13 % 253) as u8).collect();
                let mut dst = vec![0xEEu8; len + 32];
                // SAFETY: distinct vectors; `src[so..so+len]` and `dst[dof..dof+len]` lie within them.
                unsafe { copy_with(dst.as_mut_ptr().add(dof), src.as_ptr().add(so), len, threads, Stores::Streaming, Duration::ZERO) };
                assert!(dst[dof..dof + len] == src[so..so + len], "len {len}, threads {threads}, offsets {so}/{dof}");
                assert!(dst[..dof].iter().chain(&dst[dof + len..]).all(|&b| b == 0xEE), "len {len}: bytes outside written");
            }
        }
    }

    /// The two ends of a split never overlap and together cover the range, at any chunk sizes;
    /// back chunks start at 4 KiB multiples.
    #[test]
    fn split_ends_cover_the_range_once() {
        for (len, front, back) in
            [(0, 4096, 4096), (1, 4096, 4096), (10_000, 4096, 5000), ((9 << 20) + 13, 1 << 20, 3 << 20), (1 << 20, 100, 1)]
        {
            let sp = Split::new(len, front);
            let mut seen = vec![0u8; len];
            let mut i = 0;
            loop {
                let c = if i % 3 == 0 { sp.take_back(back) } else { sp.take_front() };
                let Some((at, n)) = c else { break };
                assert!(n > 0);
                if i % 3 == 0 && at > 0 {
                    assert_eq!(at % 4096, 0, "back chunk at {at}");
                }
                seen[at..at + n].iter_mut().for_each(|b| *b += 1);
                i += 1;
            }
            assert_eq!(sp.left(), 0);
            assert!(seen.iter().all(|&b| b == 1), "len {len}: a byte taken twice or never");
        }
    }

    /// `copy_front` copies what the workers take from the front while the caller takes chunks
    /// from the back; every byte ends up copied once (front by the pool, back by the caller), and
    /// with a back that takes nothing the whole range is copied by the front.
    #[test]
    fn copy_front_shares_the_range_with_the_back() {
        let len = (8 << 20) + 4095;
        let src: Vec<u8> = (0..len).map(|i| (i * 31 % 249) as u8).collect();
        for (threads, stores) in [(1, Stores::Cached), (4, Stores::Streaming)] {
            let mut dst = vec![0u8; len];
            let sp = Split::new(len, 256 << 10);
            let d = dst.as_mut_ptr() as usize;
            // The back's first chunk is taken before the front starts, as a copy engine's is.
            let first = sp.take_back(1 << 20).unwrap();
            let back_bytes = {
                let sp2 = sp.clone();
                let src = &src;
                // SAFETY: distinct vectors of `len` bytes; the back closure copies only chunks
                // it took.
                unsafe {
                    copy_front(dst.as_mut_ptr(), src.as_ptr(), &sp, threads, stores, Duration::ZERO, move || {
                        let copy = |(at, n): (usize, usize)| {
                            std::ptr::copy_nonoverlapping(src.as_ptr().add(at), (d + at) as *mut u8, n);
                            n
                        };
                        let mut moved = copy(first);
                        // Let the front take a chunk, so both ends do some.
                        let t = std::time::Instant::now();
                        while sp2.left() == len - first.1 && t.elapsed() < std::time::Duration::from_secs(10) {
                            std::thread::yield_now();
                        }
                        while let Some(c) = sp2.take_back(1 << 20) {
                            moved += copy(c);
                        }
                        moved
                    })
                }
            };
            assert!(back_bytes > 0 && back_bytes < len, "back moved {back_bytes} of {len}");
            assert!(dst == src, "threads {threads}");
            let mut dst = vec![0u8; len];
            // SAFETY: distinct vectors of `len` bytes; the back takes nothing.
            unsafe {
                copy_front(dst.as_mut_ptr(), src.as_ptr(), &Split::new(len, 1 << 20), threads, stores, Duration::from_micros(50), || ())
            };
            assert!(dst == src, "front alone, threads {threads}");
        }
    }

    /// Copies in small parts split over threads only once enough of them poll: `warm` gets
    /// workers polling (counted by `polling`) without giving them anything to copy, and a copy
    /// in 64 KiB parts then gets every byte right, with the caller polling for the workers'
    /// completion (`finish` with a spin) or sleeping (no spin).
    #[test]
    fn warm_workers_poll_and_copies_in_small_parts_are_exact() {
        warm(2, Duration::from_millis(500));
        let t = Instant::now();
        // Other tests' copies may take the polling workers meanwhile: wait for one at least.
        while polling() == 0 && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(polling() > 0, "no worker polls after warm()");
        for (len, threads, spin) in [
            (64 << 10, 4, Duration::from_millis(5)),
            ((128 << 10) - 1, 4, Duration::from_millis(5)),
            (5 * (64 << 10) + 3, 4, Duration::from_millis(5)),
            ((1 << 20) + 5, 8, Duration::from_millis(5)),
            ((1 << 20) + 5, 8, Duration::ZERO),
            (3 << 20, 2, Duration::from_millis(5)),
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i * 11 % 247) as u8).collect();
            let mut dst = vec![0u8; len + 64];
            // SAFETY: distinct vectors; `dst` is longer than `len`.
            unsafe { copy_in_parts(dst.as_mut_ptr().add(32), src.as_ptr(), len, threads, Stores::Cached, spin, 64 << 10) };
            assert!(dst[32..32 + len] == src[..], "len {len}, threads {threads}");
            assert!(dst[..32].iter().chain(&dst[32 + len..]).all(|&b| b == 0), "len {len}: bytes outside written");
        }
        // Nothing happens without a spin, and `warm(0, ..)` wakes nobody: no panics, no jobs.
        warm(4, Duration::ZERO);
        warm(0, Duration::from_millis(1));
    }

    #[test]
    fn concurrent_copies_do_not_mix() {
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || {
                    let src = vec![t + 1; 5 << 20];
                    let mut dst = vec![0u8; src.len()];
                    for _ in 0..5 {
                        // SAFETY: distinct vectors of equal length.
                        unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), src.len(), 8) };
                        assert!(dst.iter().all(|&b| b == t + 1));
                        dst.fill(0);
                    }
                });
            }
        });
    }
}
