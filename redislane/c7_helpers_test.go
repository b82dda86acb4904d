package redislane_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// c7client returns a client of the Redis server at addr, or skips t.
func c7client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		t.Skipf("no redis at %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// c7cleanup deletes namespace ns's keys at the end of t.
func c7cleanup(t *testing.T, c *redis.Client, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, "lanes:{"+ns+"}*").Result()
		fence, _ := c.Keys(ctx, "lanes:fence:{"+ns+"}").Result()
		if keys = append(keys, fence...); len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
}
