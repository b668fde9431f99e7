// The README's library example, compiled, and run by `cargo run --example quickstart` and by
// tests/examples_run.rs (which `include!`s this file, so it has no `//!` header).

use vkhost::{Device, PinnedBuffer, host};

fn main() -> vkhost::Result<()> {
    let dev = Device::open_default()?; // discrete > integrated > virtual > cpu
    let gpu = dev.alloc_buffer(64 << 20)?; // device-local VkBuffer

    // Pinned memory: the copy engine reads it directly.
    let mut pinned = PinnedBuffer::new(&dev, 64 << 20)?;
    pinned.fill(7);
    gpu.write(0, &pinned)?; // one vkCmdCopyBuffer, no staging

    // Your own memory, registered while the guard lives.
    let mut mine = vec![0u8; 64 << 20];
    let mut reg = dev.register(&mut mine)?;
    gpu.read(0, &mut reg)?; // direct into your pages
    drop(reg);
    // Or for one call only: a guard that cannot be leaked.
    dev.with_registered(&mut mine, |bytes| gpu.write(0, bytes))??;

    // The raw, address-based API (the seed's), for runtimes and FFI:
    let p = host::alloc_pinned(&dev, 4096)?;
    let (buffer, offset) = host::find(&dev, p, 4096).expect("covered");
    let _ = (buffer, offset); // use it in your own command buffers
    host::free_pinned(&dev, p)?;

    // Async: copies overlap with the host; the guard waits on drop.
    let stream = dev.stream()?; // on a copy engine
    let up = stream.upload_pinned(&pinned, 0..pinned.len(), &gpu, 0)?; // enqueued, returns at once
    // ... other host work ...
    up.wait()?;
    let done = stream.record()?; // an event; other streams can wait_event on it
    done.wait()?;

    println!("{:?}", host::stats()); // direct_bytes, staged_bytes, ...
    drop(pinned); // destroy is Busy while a PinnedBuffer lives
    dev.destroy() // explicit; the last drop also destroys
}
