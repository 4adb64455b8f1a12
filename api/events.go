package api

import "github.com/sandboxd/sandbox"

// EventList is the body of GET /v1/events. The stream, GET /v1/events/stream, carries one sandbox.Event
// as the data of each Server-Sent Event.
type EventList struct {
	Events []sandbox.Event `json:"events"`
}
