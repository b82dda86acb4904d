package batch_test

import (
	"errors"
	"fmt"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

func ExampleResponse_Reply() {
	resp, err := batch.ReadResponse([]byte(`{
  "id": "msg_01", "type": "message", "role": "assistant",
  "content": [
    {"type": "text", "text": "Reading the draft, then renumbering."},
    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "rfd/008.md"}},
    {"type": "tool_use", "id": "toolu_2", "name": "rfd_renumber", "input": {"from": 8, "to": 11}}
  ],
  "stop_reason": "tool_use", "usage": {"input_tokens": 812, "output_tokens": 64}
}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The outcomes of resp.Calls, as sched.Run returns them.
	outcomes := []sched.Outcome{
		{Status: sched.OK, Output: "# RFD 8"},
		{Status: sched.NeverDispatched, Code: sched.CodeNeverStarted, Err: errors.New("never dispatched: the run's --deadline of 2s passed")},
	}
	reply, err := resp.Reply(outcomes, batch.DefaultWording())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Format)
	fmt.Println(string(reply))
	// Output:
	// anthropic
	// [{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"# RFD 8"},{"type":"tool_result","tool_use_id":"toolu_2","content":"Not run: never dispatched: the run's --deadline of 2s passed. Nothing was done; you may call it again.","is_error":true}]}]
}
