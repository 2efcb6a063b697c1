// Package topk finds the heaviest keys of a stream in bounded memory: for
// the admin API's top offenders, the client keys a policy
// rejects most (Sketch, Windowed) and the keys closest to their limits
// (Gauge). It counts whatever keys it is given and reports them as given;
// whether they are raw client keys or hashes is the caller's choice.
//
// # Space-Saving
//
// Sketch is the Space-Saving algorithm of A. Metwally, D. Agrawal and
// A. El Abbadi, "Efficient Computation of Frequent and Top-k Elements in
// Data Streams" (ICDT 2005), with weighted updates, so that a request of
// cost n counts n. It has k counters, each a key with a count and an
// error. Add(key, w) adds w to key's count if key has a counter; else, if
// a counter is free, key takes it with count w and error 0; else key takes
// the counter with the smallest count m (forgetting its key) with count
// m+w and error m.
//
// Let N be the sum of all weights (Total) and m the smallest count once
// all k counters are in use (0 before). Then:
//
//   - the counts sum to N, so m ≤ N/k;
//   - a tracked key's true count (the sum of its weights) lies in
//     [Count−Err, Count], and Err ≤ m ≤ N/k;
//   - an untracked key's true count is at most m.
//
// Hence every key whose true count exceeds N/k is tracked, and no count is
// off by more than N/k. (By induction over updates: the smallest count
// never decreases; a key's count bounds its true count while tracked, and
// the smallest count bounds it once evicted, since it was the smallest
// when evicted; a newcomer's count m+w bounds its true count, at most m
// before plus w; and Count−Err is the weight added while tracked.) Which of
// several keys of the smallest count is evicted depends only on the
// sequence of updates, so a sequence always gives the same result.
//
// The counters sit in a binary min-heap by count, with an open-addressing
// table from key to counter: an update is one hash (taken before the
// lock), one probe and O(log k) heap steps, and allocates nothing, the
// evicted counter being reused in place. Metwally et al.'s Stream-Summary
// makes unit increments O(1), but a weighted increment may pass many of
// its count buckets, which a heap does not care about.
//
// # Recent traffic
//
// Windowed keeps a Space-Saving summary per epoch of a fixed period, the
// current one and the previous one, rotated by the instants callers pass
// in, and merges the two when read: a key's counts and errors add up, and a
// summary that does not track the key contributes its m as both count and
// error. The merged error is at most the sum of the two bounds, N/k for N
// the two epochs' total.
//
// # Latest values
//
// Gauge ranks keys by the latest value each reported (a fraction of a
// limit used, say), keeping the K highest and dropping readings older than
// a maximum age. It is a bounded, inexact top-K; its type doc states what
// it may miss.
//
// Every type is safe for concurrent use behind one mutex, held for an
// update's O(log k) steps or a read's O(k) copy. No function here reads the clock: time is an
// argument, as in the limiter package.
package topk
