-- tracebed.lua: Wireshark dissectors for tracebed's in-network aggregation
-- (INA) and far-memory headers, with every field named as in tracebed's
-- docs/ina-dataplane.md ("Packet format") and docs/farmem.md (§5).
--
--   INA        UDP port 48864 (switches and parameter servers; workers answer
--              from 40000+job): filter fields ina.*
--   far memory UDP ports 7470 (memory servers) and 7471 (paging hosts):
--              filter fields farmem.*
--
-- Use it once:   wireshark -X lua_script:wireshark/tracebed.lua tor-1.pcapng
--                tshark -X lua_script:wireshark/tracebed.lua -r tor-1.pcapng -Y ina
-- Install it:    copy it into Wireshark's personal plugin folder
--                (Linux, macOS: ~/.local/lib/wireshark/plugins/; Windows:
--                %APPDATA%\Wireshark\plugins\), or run
--                tracebed topo export --format wireshark > ~/.local/lib/wireshark/plugins/tracebed.lua
--                and restart Wireshark (Help > About > Plugins lists it).
--
-- Examples of display filters:
--   ina.flags.result == 1                 the aggregates a switch multicasts
--   ina.job == 1 && ina.offset == 0       one chunk of job 1, every worker and the result
--   farmem.type == 3 && farmem.urgency >= 6   evictions of hosts about to block
--
-- Written for tracebed (nothing copied); the layouts are those of
-- p4/ina/header.go and p4/farmem/header.go.

------------------------------------------------------------------------
-- INA

local ina = Proto("ina", "tracebed in-network aggregation")

local INA_PORT = 48864
local INA_HEADER_LEN = 24

local ina_flag_names = {
    [0x01] = "data", [0x02] = "result", [0x04] = "retransmit",
    [0x08] = "collision", [0x10] = "overflow", [0x20] = "partial",
}

local fi = {
    proto      = ProtoField.uint8("ina.proto", "Protocol version", base.DEC),
    flags      = ProtoField.uint8("ina.flags", "Flags", base.HEX),
    data       = ProtoField.bool("ina.flags.data", "Data (a worker's contribution)", 8, nil, 0x01),
    result     = ProtoField.bool("ina.flags.result", "Result (a finished aggregate)", 8, nil, 0x02),
    retransmit = ProtoField.bool("ina.flags.retransmit", "Retransmit", 8, nil, 0x04),
    collision  = ProtoField.bool("ina.flags.collision", "Collision (forwarded to the parameter server)", 8, nil, 0x08),
    overflow   = ProtoField.bool("ina.flags.overflow", "Overflow (the int32 sum wrapped)", 8, nil, 0x10),
    partial    = ProtoField.bool("ina.flags.partial", "Partial (flushed to the parameter server)", 8, nil, 0x20),
    job        = ProtoField.uint16("ina.job", "Job", base.DEC),
    slot       = ProtoField.uint16("ina.slot", "Slot (pool-relative aggregator)", base.DEC),
    ver        = ProtoField.uint8("ina.ver", "Version bit (shadow copy)", base.DEC),
    worker     = ProtoField.uint8("ina.worker", "Worker", base.DEC),
    workers    = ProtoField.uint8("ina.workers", "Workers", base.DEC),
    reserved   = ProtoField.uint8("ina.reserved", "Reserved", base.HEX),
    k          = ProtoField.uint16("ina.k", "Values (k)", base.DEC),
    round      = ProtoField.uint32("ina.round", "Round (all-reduce iteration)", base.DEC),
    offset     = ProtoField.uint32("ina.offset", "Offset (first value's index in the tensor)", base.DEC),
    bitmap     = ProtoField.uint32("ina.bitmap", "Contributors", base.HEX),
    values     = ProtoField.bytes("ina.values", "Values"),
    value      = ProtoField.int32("ina.value", "Value", base.DEC),
    sum        = ProtoField.int64("ina.values.sum", "Sum of the values", base.DEC),
}
ina.fields = {fi.proto, fi.flags, fi.data, fi.result, fi.retransmit, fi.collision, fi.overflow, fi.partial,
    fi.job, fi.slot, fi.ver, fi.worker, fi.workers, fi.reserved, fi.k, fi.round, fi.offset, fi.bitmap,
    fi.values, fi.value, fi.sum}

local ina_malformed = ProtoExpert.new("ina.malformed", "Malformed INA packet", expert.group.MALFORMED, expert.severity.ERROR)
ina.experts = {ina_malformed}

local function flag_list(flags, names)
    local out = {}
    for bit = 0, 7 do
        local m = 2 ^ bit
        if names[m] and math.floor(flags / m) % 2 == 1 then
            out[#out + 1] = names[m]
        end
    end
    return table.concat(out, ",")
end

local function popcount(x)
    local n = 0
    while x > 0 do
        n = n + x % 2
        x = math.floor(x / 2)
    end
    return n
end

function ina.dissector(buf, pinfo, tree)
    local len = buf:len()
    if len < INA_HEADER_LEN or buf(0, 1):uint() ~= 1 then
        return 0 -- not INA (another protocol version, or too short)
    end
    pinfo.cols.protocol = "INA"
    local t = tree:add(ina, buf(0, len))
    t:add(fi.proto, buf(0, 1))
    local flags = buf(1, 1):uint()
    local ft = t:add(fi.flags, buf(1, 1))
    ft:append_text(" (" .. flag_list(flags, ina_flag_names) .. ")")
    for _, f in ipairs({fi.data, fi.result, fi.retransmit, fi.collision, fi.overflow, fi.partial}) do
        ft:add(f, buf(1, 1))
    end
    t:add(fi.job, buf(2, 2))
    t:add(fi.slot, buf(4, 2))
    t:add(fi.ver, buf(6, 1))
    t:add(fi.worker, buf(7, 1))
    t:add(fi.workers, buf(8, 1))
    t:add(fi.reserved, buf(9, 1))
    local k = buf(10, 2):uint()
    t:add(fi.k, buf(10, 2))
    t:add(fi.round, buf(12, 4))
    t:add(fi.offset, buf(16, 4))
    local bitmap = buf(20, 4):uint()
    local bt = t:add(fi.bitmap, buf(20, 4))
    bt:append_text(" (" .. popcount(bitmap) .. " of " .. buf(8, 1):uint() .. " workers)")
    local want = INA_HEADER_LEN + 4 * k
    if len ~= want then
        t:add_proto_expert_info(ina_malformed, string.format("k = %d needs %d bytes, the packet has %d", k, want, len))
    end
    local n = math.min(k, math.floor((len - INA_HEADER_LEN) / 4))
    if n > 0 then
        local vt = t:add(fi.values, buf(INA_HEADER_LEN, 4 * n))
        local sum = 0
        for i = 0, n - 1 do
            local v = buf(INA_HEADER_LEN + 4 * i, 4):int()
            sum = sum + v
            vt:add(fi.value, buf(INA_HEADER_LEN + 4 * i, 4)):prepend_text("[" .. i .. "] ")
        end
        t:add(fi.sum, Int64.new(sum)):set_generated()
    end
    local kind = "?"
    if flags % 2 == 1 then
        kind = "data"
    elseif math.floor(flags / 2) % 2 == 1 then
        kind = "result"
    elseif math.floor(flags / 32) % 2 == 1 then
        kind = "partial"
    end
    pinfo.cols.info = string.format("INA %s job %d round %d offset %d slot %d ver %d worker %d/%d k %d [%s]",
        kind, buf(2, 2):uint(), buf(12, 4):uint(), buf(16, 4):uint(), buf(4, 2):uint(), buf(6, 1):uint(),
        buf(7, 1):uint(), buf(8, 1):uint(), k, flag_list(flags, ina_flag_names))
    return len
end

------------------------------------------------------------------------
-- Far memory

local farmem = Proto("farmem", "tracebed far memory")

local FM_SERVER_PORT, FM_HOST_PORT = 7470, 7471
local FM_HEADER_LEN = 24
local FM_MAGIC = 0x464d

local fm_types = {[1] = "read", [2] = "data", [3] = "write", [4] = "ack"}

local ff = {
    magic      = ProtoField.uint16("farmem.magic", "Magic", base.HEX),
    vt         = ProtoField.uint8("farmem.vt", "Version and type", base.HEX),
    version    = ProtoField.uint8("farmem.vt.version", "Protocol version", base.DEC, nil, 0xf0),
    type       = ProtoField.uint8("farmem.type", "Type", base.DEC, fm_types, 0x0f),
    flags      = ProtoField.uint8("farmem.flags", "Flags", base.HEX),
    retransmit = ProtoField.bool("farmem.flags.retransmit", "Retransmission", 8, nil, 0x80),
    not_found  = ProtoField.bool("farmem.flags.not_found", "Not found", 8, nil, 0x40),
    reserved   = ProtoField.uint8("farmem.flags.reserved", "Reserved", base.HEX, nil, 0x38),
    urgency    = ProtoField.uint8("farmem.urgency", "Urgency (0 none, 7 blocked)", base.DEC, nil, 0x07),
    id         = ProtoField.uint32("farmem.id", "Request id", base.DEC),
    page       = ProtoField.uint64("farmem.page", "Page", base.DEC),
    page_version = ProtoField.uint32("farmem.page_version", "Page version (write-backs so far)", base.DEC),
    sum        = ProtoField.uint32("farmem.sum", "CRC-32C of the page", base.HEX),
    data       = ProtoField.bytes("farmem.data", "Page data"),
    data_len   = ProtoField.uint32("farmem.data_len", "Page size", base.DEC),
}
farmem.fields = {ff.magic, ff.vt, ff.version, ff.type, ff.flags, ff.retransmit, ff.not_found, ff.reserved,
    ff.urgency, ff.id, ff.page, ff.page_version, ff.sum, ff.data, ff.data_len}

local fm_malformed = ProtoExpert.new("farmem.malformed", "Malformed far-memory message", expert.group.MALFORMED, expert.severity.ERROR)
farmem.experts = {fm_malformed}

function farmem.dissector(buf, pinfo, tree)
    local len = buf:len()
    if len < FM_HEADER_LEN or buf(0, 2):uint() ~= FM_MAGIC then
        return 0
    end
    pinfo.cols.protocol = "FARMEM"
    local t = tree:add(farmem, buf(0, len))
    t:add(ff.magic, buf(0, 2))
    local vt = buf(2, 1):uint()
    local vtt = t:add(ff.vt, buf(2, 1))
    vtt:add(ff.version, buf(2, 1))
    t:add(ff.type, buf(2, 1))
    local flags = buf(3, 1):uint()
    local ft = t:add(ff.flags, buf(3, 1))
    ft:add(ff.retransmit, buf(3, 1))
    ft:add(ff.not_found, buf(3, 1))
    ft:add(ff.reserved, buf(3, 1))
    t:add(ff.urgency, buf(3, 1))
    t:add(ff.id, buf(4, 4))
    t:add(ff.page, buf(8, 8))
    t:add(ff.page_version, buf(16, 4))
    t:add(ff.sum, buf(20, 4))
    local typ = vt % 16
    if math.floor(vt / 16) ~= 1 or fm_types[typ] == nil or math.floor(flags / 8) % 8 ~= 0 then
        t:add_proto_expert_info(fm_malformed, "unknown version, type or reserved flags")
    end
    if len > FM_HEADER_LEN then
        t:add(ff.data, buf(FM_HEADER_LEN, len - FM_HEADER_LEN))
        t:add(ff.data_len, len - FM_HEADER_LEN):set_generated()
    end
    local extra = ""
    if math.floor(flags / 128) % 2 == 1 then extra = extra .. " retransmission" end
    if math.floor(flags / 64) % 2 == 1 then extra = extra .. " not-found" end
    pinfo.cols.info = string.format("FM %s id %d page %s version %d urgency %d%s",
        fm_types[typ] or ("type " .. typ), buf(4, 4):uint(), tostring(buf(8, 8):uint64()), buf(16, 4):uint(),
        flags % 8, extra)
    return len
end

local udp = DissectorTable.get("udp.port")
udp:add(INA_PORT, ina)
udp:add(FM_SERVER_PORT, farmem)
udp:add(FM_HOST_PORT, farmem)
