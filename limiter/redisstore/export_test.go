package redisstore

import (
	"context"
	"time"
)

// NodeOf returns the node that holds clientKey's state, as the store's
// breakers name it.
func (s *Store) NodeOf(clientKey string) string { return s.node(context.Background(), clientKey) }

// ScriptCalls returns how many script calls the store sent, how many
// decisions they carried (one sent twice counts twice), and how many a
// cross-slot call on Cluster left to a call of their own.
func (s *Store) ScriptCalls() (calls, decisions, moved int64) {
	return s.batch.scripts.Load(), s.batch.decided.Load(), s.batch.moved.Load()
}

// HashSlot returns the Redis Cluster slot of every key of clientKey: the
// CRC16 (XMODEM) of its hash tag, modulo 16384.
func HashSlot(clientKey string) int {
	tag := appendKey(nil, "", clientKey, "")
	tag = tag[1 : len(tag)-1]
	var crc uint16
	for _, c := range tag {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// SetSkew puts the script's clock d ahead of the caller's with
// CallerTime: the instants the script decides at are the caller's plus d,
// the calendar windows sent with them still the caller's.
func (s *Store) SetSkew(d time.Duration) { s.skew = d }
