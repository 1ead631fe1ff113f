# embed_file.cmake — writes a C++ include file holding one file's bytes as an array, for
# resources built into the binary (the chat page, webui/index.html).
#   cmake -DIN=file -DOUT=file.inc -DNAME=kName -P embed_file.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "// Generated from ${IN} by scripts/embed_file.cmake; do not edit.\n"
                  "static const unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
                  "static const unsigned long ${NAME}_size = ${size};\n")
