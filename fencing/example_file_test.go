//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package fencing_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/lanes-dev/lanes/fencing"
)

// Two holders write one file. Holder 7 lost its lease while stalled; holder
// 8 was granted it and wrote. When holder 7 wakes up, its write is refused
// and the file keeps holder 8's data.
func ExampleFileGuard() {
	dir, err := os.MkdirTemp("", "fencing-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	guard, err := fencing.NewFileGuard(dir)
	if err != nil {
		log.Fatal(err)
	}

	err = guard.WriteFile(ctx, "config.json", 8, []byte(`{"writer": 8}`), 0o644)
	fmt.Println("holder 8:", err)
	err = guard.WriteFile(ctx, "config.json", 7, []byte(`{"writer": 7}`), 0o644)
	fmt.Println("holder 7:", err)

	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("config.json:", string(data))
	// Output:
	// holder 8: <nil>
	// holder 7: fencing: stale token 7 for "config.json": highest seen is 8 (the holder lost its lease)
	// config.json: {"writer": 8}
}
