package transport_test

// pollable: the Hub polls plain TCP sockets here.
const pollable = true
