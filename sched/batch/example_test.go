package batch_test

import (
	"fmt"

	"github.com/lanes-dev/lanes/sched/batch"
)

func ExampleParseConfig() {
	cfg, err := batch.ParseConfig([]byte(`
[runner]
max_concurrent_tools = 4

[tools.rfd_renumber]
command = ["./tools/rfd", "renumber"]
concurrency = { key = "rfd" }
timeout = "10s"
`), "/srv/agent")
	if err != nil {
		fmt.Println(err)
		return
	}
	t := cfg.Tools["rfd_renumber"]
	fmt.Println(cfg.Runner.MaxConcurrentTools, t.Concurrency.Key, t.Concurrency.Limit, t.Timeout)

	_, err = batch.ParseConfig([]byte(`
[tools.rfd_renumber]
command = ["./tools/rfd", "renumber"]
timeout = "ten seconds"
`), "")
	fmt.Println(err)
	// Output:
	// 4 rfd 1 10s
	// tools.rfd_renumber.timeout: "ten seconds" is not a duration (write one like "10s" or "1m30s")
}

func ExampleReadCalls() {
	calls, format, err := batch.ReadCalls([]byte(`{
  "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "rfd_renumber", "arguments": "{\"from\":129}"}},
    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}
  ]}}]
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(format)
	for _, c := range calls {
		fmt.Println(c.ID, c.Tool, string(c.Args))
	}
	// Output:
	// openai-chat
	// call_1 rfd_renumber {"from":129}
	// call_2 get_time {}
}
