module limitproxy

go 1.26
