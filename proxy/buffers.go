package proxy

import "sync"

// copyBufferSize is the size of the buffers ReverseProxy copies bodies
// through: httputil's own default.
const copyBufferSize = 32 << 10

// bufferPool recycles ReverseProxy's copy buffers. Without one, httputil
// allocates 32 KiB for every request it forwards, which is most of its
// allocation and, through the garbage collector, a good share of its CPU.
// Buffers are pooled as array pointers so that Put allocates nothing.
// Safe for concurrent use.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

// Get implements httputil.BufferPool.
func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBufferSize]byte)[:] }

// Put implements httputil.BufferPool.
func (b *bufferPool) Put(buf []byte) {
	if cap(buf) >= copyBufferSize {
		b.p.Put((*[copyBufferSize]byte)(buf[:copyBufferSize]))
	}
}
