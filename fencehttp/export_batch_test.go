package fencehttp

// BatchQueued returns how many of c's calls are queued for a batch.
func BatchQueued(c *Client) int {
	c.batch.mu.Lock()
	defer c.batch.mu.Unlock()
	return len(c.batch.queue)
}
