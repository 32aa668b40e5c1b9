module lastcall.test/kt

go 1.24
