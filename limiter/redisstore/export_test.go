package redisstore

import "context"

// NodeOf returns the node that holds clientKey's state, as the store's
// breakers name it.
func (s *Store) NodeOf(clientKey string) string { return s.node(context.Background(), clientKey) }
