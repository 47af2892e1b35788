module github.com/kvscope/kvscope

go 1.26
